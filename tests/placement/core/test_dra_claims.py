"""Reading DeviceClasses, ResourceClaims and ResourceClaimTemplates: every real object in
../shared/data/dra (read in place), the three API shapes, and malformed input refused with its path.

Claims read this way are fed to upstream's allocator by tests/upstream/test_oracle_dra.py, which now covers them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.core.dra.claims import (
    AllocationMode,
    ClaimError,
    ResourceClaim,
    Toleration,
    allocated_devices,
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    taint_tolerated,
)
from placement.core.dra.device_types import DeviceTaint, QualifiedName
from placement.core.dra.pools import DeviceRef
from tests.conftest import SHARED_DATA, require_shared

DRA = SHARED_DATA / "dra"
CLAIMS = DRA / "resourceclaims"
CLASSES = DRA / "deviceclasses"


def _load(path: Path) -> Any:
    return yaml.safe_load(require_shared(path).read_text())


def _claim(spec_devices: dict[str, Any], api_version: str = "resource.k8s.io/v1", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": spec_devices},
        **extra,
    }


def test_every_real_claim_template_and_class_parses() -> None:
    require_shared(CLAIMS)
    parsed = 0
    for path in sorted(CLAIMS.glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        if obj.get("kind") == "ResourceClaim":
            assert parse_resource_claim(obj).spec.requests, path.name
            parsed += 1
        elif obj.get("kind") == "ResourceClaimTemplate":
            assert parse_resource_claim_template(obj).spec.requests, path.name
            parsed += 1
    classes = [parse_device_class(yaml.safe_load(p.read_text())) for p in sorted(CLASSES.glob("*.yaml"))]
    assert parsed >= 18
    assert {c.name for c in classes} >= {"gpu.nvidia.com", "mig.nvidia.com", "gpu.example.com"}


def test_nvidia_gpu_class_selector() -> None:
    gpu_class = parse_device_class(_load(CLASSES / "nvidia-DERIVED-render_DeviceClass_gpu.nvidia.com.yaml"))
    assert gpu_class.selectors == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    )
    assert gpu_class.config == ()


def test_mig_template_requests_and_match_attribute() -> None:
    template = parse_resource_claim_template(
        _load(
            CLAIMS / "nvidia-quickstart-gpu-test4_ResourceClaimTemplate_mig-devices_"
            "four-mig-devices-matchAttribute-parentUUID.yaml"
        )
    )
    assert [r.name for r in template.spec.requests] == ["mig-1g-5gb-0", "mig-1g-5gb-1", "mig-2g-10gb", "mig-3g-20gb"]
    first = template.spec.requests[0].exactly
    assert first is not None
    assert first.device_class_name == "mig.nvidia.com"
    assert first.allocation_mode is AllocationMode.EXACT_COUNT
    assert first.count == 1
    (constraint,) = template.spec.constraints
    assert constraint.match_attribute == QualifiedName("gpu.nvidia.com", "parentUUID")
    assert constraint.requests == ()


def test_first_available_alternatives_keep_their_order() -> None:
    template = parse_resource_claim_template(
        _load(CLAIMS / "example-driver-prioritized-alternatives_ResourceClaimTemplate_prioritized-gpu.yaml")
    )
    (request,) = template.spec.requests
    assert request.exactly is None
    assert [s.name for s in request.first_available] == ["bleeding-edge-gpu", "huge-gpu", "older-gpu"]
    assert request.first_available[1].spec.selectors == (
        "device.capacity['gpu.example.com'].memory.compareTo(quantity('1Ti')) >= 0",
    )


def test_admin_access_and_all_mode_are_read() -> None:
    template = parse_resource_claim_template(
        _load(CLAIMS / "example-driver-admin-access_ResourceClaimTemplate_multiple-gpus-admin.yaml")
    )
    spec = template.spec.requests[0].exactly
    assert spec is not None
    assert spec.admin_access
    assert spec.allocation_mode is AllocationMode.ALL


def test_claim_config_keeps_requests_and_opaque_parameters() -> None:
    template = parse_resource_claim_template(
        _load(
            CLAIMS
            / "nvidia-quickstart-gpu-test5_ResourceClaimTemplate_multiple-gpus_timeslicing-and-mps-opaque-config.yaml"
        )
    )
    assert [c.requests for c in template.spec.config] == [("ts-gpu",), ("mps-gpu",)]
    assert template.spec.config[1].opaque.driver == "gpu.nvidia.com"
    assert template.spec.config[1].opaque.parameters["sharing"]["strategy"] == "MPS"


def test_capacity_requests_are_kept_for_the_allocator_to_refuse() -> None:
    claim = parse_resource_claim(
        _load(CLAIMS / "example-driver-gpu-allow-multiple-allocations_ResourceClaim_shared-gpu-pod0.yaml")
    )
    spec = claim.spec.requests[0].exactly
    assert spec is not None
    assert spec.capacity_requests == (("compute", "20"), ("memory", "16Gi"))


def test_v1beta2_status_allocation_and_reserved_for() -> None:
    claim = parse_resource_claim(
        _load(CLAIMS / "k8s-website-tutorial_resourceclaim_allocated-reserved_gpu.example.com_v1beta2.yaml")
    )
    assert claim.api_version == "resource.k8s.io/v1beta2"
    assert claim.uid == "79e1e8d8-7e53-4362-aad1-eca97678339e"
    assert claim.allocation is not None
    assert [(d.request, d.ref) for d in claim.allocation] == [
        ("some-gpu", DeviceRef("gpu.example.com", "kind-worker", "gpu-4"))
    ]
    assert [(c.resource, c.name, c.uid) for c in claim.reserved_for] == [
        ("pods", "pod0", "fa55b59b-d28d-4f7d-9e5b-ef4c8476dff5")
    ]
    assert allocated_devices([claim]) == {DeviceRef("gpu.example.com", "kind-worker", "gpu-4")}


def test_v1beta1_requests_carry_the_fields_directly() -> None:
    devices = {
        "requests": [
            {
                "name": "gpu",
                "deviceClassName": "gpu.nvidia.com",
                "count": 2,
                "selectors": [{"cel": {"expression": "true"}}],
            },
            {"name": "alt", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]},
        ]
    }
    claim = parse_resource_claim(_claim(devices, "resource.k8s.io/v1beta1"))
    exact = claim.spec.requests[0].exactly
    assert exact is not None
    assert (exact.device_class_name, exact.count, exact.selectors) == ("gpu.nvidia.com", 2, ("true",))
    assert claim.spec.requests[1].first_available[0].spec.device_class_name == "gpu.nvidia.com"
    # The v1 shape puts the same fields under ``exactly``; v1 without it is refused.
    with pytest.raises(
        ClaimError, match=r"spec\.devices\.requests\[0\]: must set exactly one of exactly, firstAvailable"
    ):
        parse_resource_claim(_claim(devices, "resource.k8s.io/v1"))


def test_an_unallocated_claim_has_no_allocation() -> None:
    claim = parse_resource_claim(
        _load(CLAIMS / "nvidia-aicr-evidence_ResourceClaim_gpu-claim_exactcount-1_spec-only.yaml")
    )
    assert isinstance(claim, ResourceClaim)
    assert claim.allocation is None
    assert allocated_devices([claim]) == frozenset()


@pytest.mark.parametrize(
    ("devices", "path"),
    [
        (
            {"requests": [{"name": "gpu", "exactly": {}}]},
            r"spec\.devices\.requests\[0\]\.exactly\.deviceClassName: is required",
        ),
        (
            {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x", "count": 0}}]},
            r"exactly\.count: must be at least 1",
        ),
        (
            {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x", "allocationMode": "Some"}}]},
            r"allocationMode: 'Some'",
        ),
        (
            {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x", "selectors": [{"cel": {}}]}}]},
            r"selectors\[0\]\.cel\.expression: is required",
        ),
        ({"requests": "gpu"}, r"spec\.devices\.requests: must be a list"),
        (
            {
                "requests": [{"name": "a", "exactly": {"deviceClassName": "x"}}],
                "constraints": [{"matchAttribute": "parentUUID"}],
            },
            r"constraints\[0\]\.matchAttribute: 'parentUUID' is not a fully qualified name",
        ),
        (
            {"requests": [{"name": "a", "exactly": {"deviceClassName": "x"}}], "constraints": [{}]},
            r"constraints\[0\]: must set exactly one of matchAttribute",
        ),
        (
            {
                "requests": [
                    {"name": "a", "exactly": {"deviceClassName": "x"}},
                    {"name": "a", "exactly": {"deviceClassName": "x"}},
                ]
            },
            r"requests\[1\]\.name: 'a' is used twice",
        ),
        (
            {
                "requests": [
                    {
                        "name": "a",
                        "exactly": {"deviceClassName": "x", "tolerations": [{"operator": "Exists", "value": "v"}]},
                    }
                ]
            },
            r"tolerations\[0\]\.value: must be empty",
        ),
    ],
)
def test_malformed_claims_name_the_object_and_the_path(devices: dict[str, Any], path: str) -> None:
    with pytest.raises(ClaimError, match=r"^ResourceClaim 'c': " + ".*" + path):
        parse_resource_claim(_claim(devices))


def test_malformed_status_and_object() -> None:
    status = {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p"}]}}}
    with pytest.raises(ClaimError, match=r"status\.allocation\.devices\.results\[0\]\.device: is required"):
        parse_resource_claim(_claim({"requests": []}, status=status))
    with pytest.raises(ClaimError, match=r"apiVersion: 'resource.k8s.io/v1alpha2' is not one of"):
        parse_resource_claim(_claim({"requests": []}, "resource.k8s.io/v1alpha2"))
    with pytest.raises(ClaimError, match=r"^DeviceClass 'x': kind: must be DeviceClass"):
        parse_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "Pod", "metadata": {"name": "x"}})


def test_tolerations_follow_the_device_toleration_rules() -> None:
    taint = DeviceTaint(key="example.com/maintenance", effect="NoSchedule", value="planned")
    assert Toleration(key="example.com/maintenance", value="planned").tolerates(taint)
    assert not Toleration(key="example.com/maintenance", value="other").tolerates(taint)
    assert Toleration(key="example.com/maintenance", operator="Exists").tolerates(taint)
    assert Toleration(operator="Exists").tolerates(taint)  # an empty key with Exists tolerates everything
    assert not Toleration(operator="Exists", effect="NoExecute").tolerates(taint)
    assert not taint_tolerated(taint, ())
    assert taint_tolerated(DeviceTaint(key="k", effect="None"), ())  # only NoSchedule/NoExecute need one
