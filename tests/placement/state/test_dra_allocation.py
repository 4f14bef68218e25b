"""Choosing devices for a pod's claims on one node (first fit as kube-scheduler's stable allocator, best fit
by GPU topology) and the ``status.allocation`` written for them.

Real data (../shared/data/dra, read in place): the EKS H100 slices, the example driver's mock GPUs, the
NVIDIA and example DeviceClasses and claims. Authored fixtures (tests/dra_fixtures/alloc_*.yaml) cover
what no capture shows: MIG placements, taints, an NVSwitch node with two NUMA cells and a PCIe node with
NVLink bridge pairs (the agent's side of those two from tests/machines/node_topologies).

Upstream's own allocator now judges first fit device for device, and best fit's choices, on random clusters:
tests/upstream/test_oracle_dra.py (k8s.io/dynamic-resource-allocation v0.37.2).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from kubernetes_validate import utils as kubernetes_validate_utils

from kubenexus.topology.model import NodeTopology, PathKind
from placement.core.dra.allocation import allocated_claim, allocation_result
from placement.core.dra.best_fit import BestFit, FitWeights, best_fit
from placement.core.dra.claims import (
    DeviceClass,
    OpaqueConfig,
    ResourceClaim,
    claim_from_template,
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
)
from placement.core.dra.first_fit import Allocation, Unallocatable, first_fit
from placement.core.dra.pools import DeviceRef, Pool, gather_pools
from placement.core.dra.search import AllocationError, Inventory, Search, node_inventory
from placement.core.dra.slices import parse_resource_slice
from placement.state.dra_state import DraState
from tests import TESTS
from tests.conftest import SHARED_DATA, require_shared
from tests.machines.node_topologies import nvswitch_node, pcie_node

DRA = SHARED_DATA / "dra"
CLAIMS = DRA / "resourceclaims"
CLASSES = DRA / "deviceclasses"
SLICES = DRA / "resourceslices"
FIXTURES = TESTS / "dra_fixtures"
NVIDIA = "gpu.nvidia.com"
EKS_171 = ("nvidia-gpu_h100-80gb-hbm3_eks_ip-10-0-171-111_k8s-v1.35.yaml", "ip-10-0-171-111.ec2.internal")
EKS_206 = ("nvidia-gpu_h100-80gb-hbm3_eks_ip-10-0-206-2_k8s-v1.35.yaml", "ip-10-0-206-2.ec2.internal")
MOCK = ("example-driver_gpu.example.com_kind-worker_8-mock-gpus_readme.yaml", "dra-example-driver-cluster-worker")
SINGLE_GPU = "nvidia-quickstart-gpu-test1_ResourceClaimTemplate_single-gpu_single-gpu-per-pod.yaml"
MIG_DEVICES = (
    "nvidia-quickstart-gpu-test4_ResourceClaimTemplate_mig-devices_four-mig-devices-matchAttribute-parentUUID.yaml"
)
HUGE = "device.capacity['gpu.example.com'].memory.compareTo(quantity('1Ti')) >= 0"
SCHEMA_VERSIONS = [
    v for v in dict.fromkeys(kubernetes_validate_utils.all_versions()) if tuple(map(int, v.split(".")[:2])) >= (1, 34)
]


# --- helpers -------------------------------------------------------------------------------------------


def _yaml(path: Path) -> Any:
    return (
        yaml.safe_load(require_shared(path).read_text())
        if SHARED_DATA in path.parents
        else yaml.safe_load(path.read_text())
    )


def _classes() -> dict[str, DeviceClass]:
    """The classes the tests use, authored from their published sources (tests/dra_fixtures)."""
    documents = yaml.safe_load_all((FIXTURES / "deviceclasses.yaml").read_text())
    return {c.name: c for c in (parse_device_class(doc) for doc in documents)}


@pytest.mark.parametrize(
    "captured",
    [
        "nvidia-DERIVED-render_DeviceClass_gpu.nvidia.com.yaml",
        "nvidia-DERIVED-render_DeviceClass_mig.nvidia.com.yaml",
        "k8s-website-example_DeviceClass_gpu.example.com_v1.yaml",
    ],
)
def test_the_authored_classes_are_the_captured_ones(captured: str) -> None:
    device_class = parse_device_class(_yaml(CLASSES / captured))
    assert _classes()[device_class.name] == device_class


def _template_claim(file: str, name: str = "pod-0-gpu-abc12") -> ResourceClaim:
    return claim_from_template(parse_resource_claim_template(_yaml(CLAIMS / file)), name=name, uid=f"uid-{name}")


def _inventory(
    path: Path, node: str, *, claims: tuple[ResourceClaim, ...] = (), in_flight: tuple[str, ...] = ()
) -> Inventory:
    item = parse_resource_slice(_yaml(path))
    refs = tuple(DeviceRef(item.driver, item.pool.name, d) for d in in_flight)
    return node_inventory(gather_pools([item]), node, {}, claims=claims, in_flight=refs)


def _eks(capture: tuple[str, str], **kwargs: Any) -> Inventory:
    return _inventory(SLICES / capture[0], capture[1], **kwargs)


def _picked(result: Allocation | Unallocatable, claim: int = 0) -> list[tuple[str, str]]:
    assert isinstance(result, Allocation), result
    return [(d.request, d.device.ref.device) for d in result.claims[claim].devices]


def _holding(*devices: tuple[str, str], name: str = "holder") -> ResourceClaim:
    """An allocated claim (the kind of object the cluster holds) with ``(pool, device)`` results."""
    results = [{"request": "gpu", "driver": NVIDIA, "pool": pool, "device": device} for pool, device in devices]
    return parse_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "other"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": NVIDIA}}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )


def _claim(requests: list[dict[str, Any]], **devices: Any) -> ResourceClaim:
    return parse_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "authored", "namespace": "ns", "uid": "uid-authored"},
            "spec": {"devices": {"requests": requests, **devices}},
        }
    )


def _gpus(count: int, **exactly: Any) -> ResourceClaim:
    return _claim([{"name": "gpus", "exactly": {"deviceClassName": NVIDIA, "count": count, **exactly}}])


# --- first fit on real data ----------------------------------------------------------------------------


@pytest.mark.parametrize(("capture", "first"), [(EKS_171, "gpu-1"), (EKS_206, "gpu-2")])
def test_first_fit_takes_the_first_device_in_published_order(capture: tuple[str, str], first: str) -> None:
    # The captures list their GPUs unsorted (gpu-1... and gpu-2...); first fit follows the list, not the names.
    result = first_fit([_template_claim(SINGLE_GPU)], classes=_classes(), inventory=_eks(capture))
    assert _picked(result) == [("gpu", first)]


def test_first_fit_skips_allocated_and_in_flight_devices() -> None:
    pool = EKS_206[1]
    inventory = _eks(EKS_206, claims=(_holding((pool, "gpu-2")),), in_flight=("gpu-3",))
    result = first_fit([_template_claim(SINGLE_GPU)], classes=_classes(), inventory=inventory)
    assert _picked(result) == [("gpu", "gpu-4")]


def test_two_claims_of_one_pod_get_different_devices() -> None:
    claims = [_template_claim(SINGLE_GPU, "a"), _template_claim(SINGLE_GPU, "b")]
    result = first_fit(claims, classes=_classes(), inventory=_eks(EKS_206))
    assert (_picked(result, 0), _picked(result, 1)) == ([("gpu", "gpu-2")], [("gpu", "gpu-3")])


def test_match_attribute_on_pcie_root_cannot_pair_two_p5_gpus() -> None:
    # On p5 every GPU has its own PCIe root (NOTES 1), so this real-world constraint never fits two GPUs.
    constraint = {"matchAttribute": "resource.kubernetes.io/pcieRoot"}
    result = first_fit([_gpus(2, selectors=[])], classes=_classes(), inventory=_eks(EKS_171))
    assert len(_picked(result)) == 2
    paired = _claim([{"name": "gpus", "exactly": {"deviceClassName": NVIDIA, "count": 2}}], constraints=[constraint])
    refused = first_fit([paired], classes=_classes(), inventory=_eks(EKS_171))
    assert isinstance(refused, Unallocatable)
    assert not refused.error
    assert "8 devices match, 8 not allocated, 2 wanted" in refused.reason


def test_distinct_attribute() -> None:
    distinct_product = _claim(
        [{"name": "gpus", "exactly": {"deviceClassName": NVIDIA, "count": 2}}],
        constraints=[{"distinctAttribute": "gpu.nvidia.com/productName"}],
    )
    assert isinstance(first_fit([distinct_product], classes=_classes(), inventory=_eks(EKS_171)), Unallocatable)
    distinct_uuid = _claim(
        [{"name": "gpus", "exactly": {"deviceClassName": NVIDIA, "count": 2}}],
        constraints=[{"distinctAttribute": "gpu.nvidia.com/uuid"}],
    )
    assert _picked(first_fit([distinct_uuid], classes=_classes(), inventory=_eks(EKS_171))) == [
        ("gpus", "gpu-1"),
        ("gpus", "gpu-2"),
    ]


def test_all_mode_takes_every_gpu_or_none() -> None:
    everything = _claim([{"name": "all", "exactly": {"deviceClassName": NVIDIA, "allocationMode": "All"}}])
    picked = _picked(first_fit([everything], classes=_classes(), inventory=_eks(EKS_171)))
    assert sorted(d for _, d in picked) == [f"gpu-{i}" for i in range(8)]
    one_taken = _eks(EKS_171, claims=(_holding((EKS_171[1], "gpu-5")),))
    result = first_fit([everything], classes=_classes(), inventory=one_taken)
    assert isinstance(result, Unallocatable)
    assert not result.error


def test_all_mode_over_an_incomplete_pool_is_an_error() -> None:
    item = parse_resource_slice(_yaml(FIXTURES / "pool_missing_slice.yaml"))
    node = item.node_selection.node_name or ""
    inventory = node_inventory(gather_pools([item]), node, {})
    everything = _claim([{"name": "all", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "All"}}])
    result = first_fit([everything], classes=_classes(), inventory=inventory)
    assert isinstance(result, Unallocatable)
    assert result.error
    assert "asks for all devices, but resource pool" in result.reason
    assert "is currently being updated" in result.reason


def test_first_available_tries_alternatives_in_order() -> None:
    inventory = _inventory(SLICES / MOCK[0], MOCK[1])
    preferred = _template_claim("example-driver-prioritized-alternatives_ResourceClaimTemplate_preferred-gpu.yaml")
    assert _picked(first_fit([preferred], classes=_classes(), inventory=inventory)) == [("gpu/latest-gpu", "gpu-0")]
    # No mock GPU is BLEEDING-EDGE-GPU or has 1Ti of memory: the third alternative is the one used.
    prioritized = _template_claim("example-driver-prioritized-alternatives_ResourceClaimTemplate_prioritized-gpu.yaml")
    result = first_fit([prioritized], classes=_classes(), inventory=inventory)
    assert _picked(result) == [("gpu/older-gpu", "gpu-0")]
    assert isinstance(result, Allocation)
    assert result.claims[0].chosen_subrequests == ("older-gpu",)


def test_admin_access_is_refused_with_a_clear_reason() -> None:
    claim = _template_claim("example-driver-admin-access_ResourceClaimTemplate_multiple-gpus-admin.yaml")
    result = first_fit([claim], classes=_classes(), inventory=_inventory(SLICES / MOCK[0], MOCK[1]))
    assert isinstance(result, Unallocatable)
    assert result.error
    assert "admin access is not supported by this scheduler" in result.reason


def test_a_selector_that_matches_nothing_says_so() -> None:
    # gpu-test6 wants an A100; the EKS node has H100s (its `.index` is never reached: `false && ...`).
    claim = _template_claim(
        "nvidia-quickstart-gpu-test6_ResourceClaimTemplate_a100_cel-productName-regex-and-index.yaml"
    )
    result = first_fit([claim], classes=_classes(), inventory=_eks(EKS_171))
    assert isinstance(result, Unallocatable)
    assert not result.error
    assert (
        "request gpu: no device of the node matches the selectors of class gpu.nvidia.com and the request"
        in result.reason
    )


def test_a_cel_runtime_error_is_the_reason_not_a_miss() -> None:
    claim = _gpus(1, selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].index == 0"}}])
    result = first_fit([claim], classes=_classes(), inventory=_eks(EKS_171))
    assert isinstance(result, Unallocatable)
    assert result.error
    assert "runtime error" in result.reason
    assert "no such key" in result.reason
    assert "device gpu.nvidia.com/ip-10-0-171-111.ec2.internal/gpu-1" in result.reason


def test_unknown_class_and_the_32_result_limit_are_errors() -> None:
    unknown = _claim([{"name": "x", "exactly": {"deviceClassName": "nope.example.com"}}])
    result = first_fit([unknown], classes=_classes(), inventory=_eks(EKS_171))
    assert isinstance(result, Unallocatable)
    assert "device class nope.example.com does not exist" in result.reason
    too_many = first_fit([_gpus(33)], classes=_classes(), inventory=_eks(EKS_171))
    assert isinstance(too_many, Unallocatable)
    assert "number of requested devices 33 exceeds the claim limit of 32" in too_many.reason


def test_consumable_capacity_is_refused() -> None:
    claim = parse_resource_claim(
        _yaml(CLAIMS / "example-driver-gpu-allow-multiple-allocations_ResourceClaim_shared-gpu-pod0.yaml")
    )
    result = first_fit([claim], classes=_classes(), inventory=_inventory(SLICES / MOCK[0], MOCK[1]))
    assert isinstance(result, Unallocatable)
    assert "capacity requests (consumable capacity) are not supported" in result.reason


# --- taints and MIG (authored) -------------------------------------------------------------------------


def test_device_taints_need_a_toleration() -> None:
    inventory = _inventory(FIXTURES / "alloc_tainted.yaml", "taint-node")
    assert _picked(first_fit([_gpus(1)], classes=_classes(), inventory=inventory)) == [("gpus", "gpu-2")]
    tolerating = _gpus(1, tolerations=[{"key": "example.com/maintenance", "operator": "Exists"}])
    result = first_fit([tolerating], classes=_classes(), inventory=inventory)
    assert _picked(result) == [("gpus", "gpu-0")]
    assert isinstance(result, Allocation)
    written = allocation_result(result.claims[0], "taint-node")
    assert written["devices"]["results"][0]["tolerations"] == [{"operator": "Exists", "key": "example.com/maintenance"}]
    # The NoExecute taint of gpu-1 is not covered by that toleration: two GPUs means gpu-0 and gpu-2.
    two = _gpus(2, tolerations=[{"key": "example.com/maintenance", "operator": "Exists"}])
    assert _picked(first_fit([two], classes=_classes(), inventory=inventory)) == [("gpus", "gpu-0"), ("gpus", "gpu-2")]


def _mig_inventory(*holders: ResourceClaim) -> Inventory:
    return _inventory(FIXTURES / "alloc_mig_a100.yaml", "mig-node", claims=holders)


def test_match_attribute_parent_uuid_puts_the_mig_devices_on_one_gpu() -> None:
    claim = _template_claim(MIG_DEVICES)
    picked = _picked(first_fit([claim], classes=_classes(), inventory=_mig_inventory()))
    assert [r for r, _ in picked] == ["mig-1g-5gb-0", "mig-1g-5gb-1", "mig-2g-10gb", "mig-3g-20gb"]
    assert [d for _, d in picked] == [
        "gpu-1-mig-1g5gb-19-0",
        "gpu-1-mig-1g5gb-19-1",
        "gpu-1-mig-2g10gb-14-2",
        "gpu-1-mig-3g20gb-9-4",
    ]
    # Without the constraint first fit starts on gpu-0 and spreads the claim over both GPUs.
    loose = replace(claim, spec=replace(claim.spec, constraints=()))
    spread = _picked(first_fit([loose], classes=_classes(), inventory=_mig_inventory()))
    assert {d.split("-mig-")[0] for _, d in spread} == {"gpu-0", "gpu-1"}


def test_a_full_gpu_and_its_mig_devices_exclude_each_other() -> None:
    claim = _template_claim(MIG_DEVICES)
    # gpu-1 is held whole: its MIG devices are the same silicon, and gpu-0 has no 3g.20gb.
    result = first_fit([claim], classes=_classes(), inventory=_mig_inventory(_holding(("mig-node", "gpu-1"))))
    assert isinstance(result, Unallocatable)
    assert not result.error
    # A MIG instance held on gpu-0 leaves only gpu-1 for a whole-GPU request.
    held = _mig_inventory(_holding(("mig-node", "gpu-0-mig-1g5gb-19-1")))
    assert _picked(first_fit([_gpus(1)], classes=_classes(), inventory=held)) == [("gpus", "gpu-1")]
    assert isinstance(first_fit([_gpus(2)], classes=_classes(), inventory=held), Unallocatable)
    best = best_fit([_gpus(1)], classes=_classes(), inventory=held)
    assert isinstance(best, BestFit)
    assert _picked(best.allocation) == [("gpus", "gpu-1")]


# --- best fit by topology (authored slices, the agent's machines) -----------------------------------------


def _joined(topology: NodeTopology, inventory: Inventory) -> NodeTopology:
    """The agent's topology with each GPU's UUID set to the one the fixture publishes for gpu-<index>."""
    uuids = {}
    for entry in inventory.devices:
        attribute = entry.device.attribute(NVIDIA, "uuid")
        assert attribute is not None
        uuids[entry.device.name] = str(attribute.value)
    return replace(topology, gpus=tuple(replace(g, uuid=uuids[f"gpu-{g.index}"]) for g in topology.gpus))


def _indices(result: Allocation | Unallocatable) -> list[int]:
    return sorted(int(device.removeprefix("gpu-")) for _, device in _picked(result))


def _bridged(topology: NodeTopology) -> set[frozenset[int]]:
    return {
        frozenset((int(link.a[3:]), int(link.b[3:])))
        for link in topology.links
        if link.path is PathKind.NVLINK and link.a.startswith("GPU") and link.b.startswith("GPU")
    }


def test_best_fit_on_nvswitch_takes_the_preferred_numa_cell() -> None:
    inventory = _inventory(FIXTURES / "alloc_nvswitch_8gpu.yaml", "nvswitch-node")
    topology = _joined(nvswitch_node(), inventory)
    cell_1 = sorted(g.index for g in topology.gpus if g.numa_node == 1)
    assert len(cell_1) == 4
    assert _indices(first_fit([_gpus(4)], classes=_classes(), inventory=inventory)) == [0, 1, 2, 3]
    best = best_fit([_gpus(4)], classes=_classes(), inventory=inventory, topology=topology, preferred_numa=1)
    assert isinstance(best, BestFit)
    assert _indices(best.allocation) == cell_1
    assert best.score.numa == 1
    assert best.examined == 70  # C(8, 4): every set met once
    assert not best.truncated
    # Without the NUMA weight every 4-set of an NVSwitch node ties, and the earliest (first fit's) wins.
    neutral = best_fit(
        [_gpus(4)],
        classes=_classes(),
        inventory=inventory,
        topology=topology,
        preferred_numa=1,
        weights=FitWeights(numa=Fraction(0)),
    )
    assert isinstance(neutral, BestFit)
    assert _indices(neutral.allocation) == [0, 1, 2, 3]


def test_best_fit_on_pcie_takes_bridged_pairs_whole() -> None:
    inventory = _inventory(FIXTURES / "alloc_pcie_bridged_8gpu.yaml", "pcie-node")
    topology = _joined(pcie_node(), inventory)
    bridges = _bridged(topology)
    assert len(bridges) == 4
    first_two = _indices(first_fit([_gpus(2)], classes=_classes(), inventory=inventory))
    assert frozenset(first_two) not in bridges  # published order splits the bridges
    two = best_fit([_gpus(2)], classes=_classes(), inventory=inventory, topology=topology)
    assert isinstance(two, BestFit)
    assert frozenset(_indices(two.allocation)) in bridges
    four = best_fit([_gpus(4)], classes=_classes(), inventory=inventory, topology=topology)
    assert isinstance(four, BestFit)
    chosen = set(_indices(four.allocation))
    assert sum(1 for pair in bridges if pair <= chosen) == 2
    first_four = set(_indices(first_fit([_gpus(4)], classes=_classes(), inventory=inventory)))
    assert sum(1 for pair in bridges if pair <= first_four) < 2


def test_best_fit_keeps_other_bridges_whole_when_one_gpu_is_taken() -> None:
    inventory = _inventory(FIXTURES / "alloc_pcie_bridged_8gpu.yaml", "pcie-node")
    topology = _joined(pcie_node(), inventory)
    partner = {a: b for pair in _bridged(topology) for a, b in (tuple(pair), tuple(pair)[::-1])}
    held = _inventory(
        FIXTURES / "alloc_pcie_bridged_8gpu.yaml", "pcie-node", claims=(_holding(("pcie-node", "gpu-0")),)
    )
    one = best_fit([_gpus(1)], classes=_classes(), inventory=held, topology=topology)
    assert isinstance(one, BestFit)
    # The widowed partner of gpu-0 is the one GPU whose taking breaks no free bridge.
    assert _indices(one.allocation) == [partner[0]]
    assert _indices(first_fit([_gpus(1)], classes=_classes(), inventory=held)) != [partner[0]]


def test_best_fit_stops_at_the_cap_and_says_so() -> None:
    inventory = _inventory(FIXTURES / "alloc_nvswitch_8gpu.yaml", "nvswitch-node")
    topology = _joined(nvswitch_node(), inventory)
    capped = best_fit(
        [_gpus(4)], classes=_classes(), inventory=inventory, topology=topology, preferred_numa=1, max_candidates=3
    )
    assert isinstance(capped, BestFit)
    assert (capped.examined, capped.truncated) == (3, True)
    assert _indices(capped.allocation) != sorted(g.index for g in topology.gpus if g.numa_node == 1)


def test_best_fit_reports_the_same_refusals_as_first_fit() -> None:
    claim = _template_claim("example-driver-admin-access_ResourceClaimTemplate_multiple-gpus-admin.yaml")
    result = best_fit([claim], classes=_classes(), inventory=_inventory(SLICES / MOCK[0], MOCK[1]))
    assert isinstance(result, Unallocatable)
    assert "admin access is not supported by this scheduler" in result.reason


# --- what is written -----------------------------------------------------------------------------------


def _validate(claim: dict[str, Any]) -> None:
    assert SCHEMA_VERSIONS, "kubernetes-validate ships no schema with resource.k8s.io/v1"
    for version in SCHEMA_VERSIONS:
        kubernetes_validate.validate(claim, version, strict=True)


def _claim_object(template_file: str, name: str) -> dict[str, Any]:
    template = _yaml(CLAIMS / template_file)
    return {
        "apiVersion": template["apiVersion"],
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": template["metadata"]["namespace"], "uid": f"uid-{name}"},
        "spec": template["spec"]["spec"],
    }


def test_the_written_claim_is_what_kube_scheduler_writes_and_the_schema_accepts() -> None:
    obj = _claim_object(SINGLE_GPU, "pod-0-gpu-x7k2p")
    claim = parse_resource_claim(obj)
    result = first_fit([claim], classes=_classes(), inventory=_eks(EKS_206))
    assert isinstance(result, Allocation)
    written = allocated_claim(obj, result.claims[0], EKS_206[1], pod_name="pod-0", pod_uid="pod-uid-0")
    assert written["status"] == {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": NVIDIA, "pool": EKS_206[1], "device": "gpu-2"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [EKS_206[1]]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "pod-0", "uid": "pod-uid-0"}],
    }
    assert "status" not in obj  # the input is not changed
    _validate(written)
    # Read back, the written claim holds its device for everyone else.
    back = parse_resource_claim(written)
    again = first_fit([claim], classes=_classes(), inventory=_eks(EKS_206, claims=(back,)))
    assert _picked(again) == [("gpu", "gpu-3")]


def test_configs_come_class_first_then_claim() -> None:
    obj = _claim_object(
        "nvidia-quickstart-gpu-test5_ResourceClaimTemplate_multiple-gpus_timeslicing-and-mps-opaque-config.yaml", "c5"
    )
    claim = parse_resource_claim(obj)
    classes = _classes()
    class_parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
    classes[NVIDIA] = replace(classes[NVIDIA], config=(OpaqueConfig(NVIDIA, class_parameters),))
    result = first_fit([claim], classes=classes, inventory=_eks(EKS_171))
    assert isinstance(result, Allocation)
    written = allocated_claim(obj, result.claims[0], EKS_171[1], pod_name="p", pod_uid="u")
    config = written["status"]["allocation"]["devices"]["config"]
    assert [(c["source"], c.get("requests")) for c in config] == [
        ("FromClass", None),  # one per request that used the class
        ("FromClass", None),
        ("FromClaim", ["ts-gpu"]),
        ("FromClaim", ["mps-gpu"]),
    ]
    assert config[0]["opaque"] == {"driver": NVIDIA, "parameters": class_parameters}
    assert config[3]["opaque"]["parameters"]["sharing"]["strategy"] == "MPS"
    assert [r["request"] for r in written["status"]["allocation"]["devices"]["results"]] == ["ts-gpu", "mps-gpu"]
    _validate(written)


def test_a_subrequest_config_and_result_name() -> None:
    inventory = _inventory(SLICES / MOCK[0], MOCK[1])
    requests = [
        {
            "name": "gpu",
            "firstAvailable": [
                {
                    "name": "huge",
                    "deviceClassName": "gpu.example.com",
                    "selectors": [{"cel": {"expression": HUGE}}],
                },
                {"name": "any", "deviceClassName": "gpu.example.com"},
            ],
        }
    ]
    parameters = {"apiVersion": "gpu.resource.example.com/v1alpha1", "kind": "GpuConfig"}
    config = [
        {"requests": ["gpu/huge"], "opaque": {"driver": "gpu.example.com", "parameters": parameters}},
        {"requests": ["gpu/any"], "opaque": {"driver": "gpu.example.com", "parameters": parameters}},
    ]
    claim = _claim(requests, config=config)
    result = first_fit([claim], classes=_classes(), inventory=inventory)
    assert isinstance(result, Allocation)
    written = allocation_result(result.claims[0], MOCK[1])
    assert [r["request"] for r in written["devices"]["results"]] == ["gpu/any"]
    assert [c["requests"] for c in written["devices"]["config"]] == [["gpu/any"]]


def test_devices_available_on_all_nodes_need_no_node_selector() -> None:
    item = parse_resource_slice(_yaml(SLICES / EKS_171[0]))
    everywhere = replace(item, node_selection=replace(item.node_selection, node_name=None, all_nodes=True))
    inventory = node_inventory(gather_pools([everywhere]), "any-node", {})
    result = first_fit([_gpus(1)], classes=_classes(), inventory=inventory)
    assert isinstance(result, Allocation)
    assert "nodeSelector" not in allocation_result(result.claims[0], "any-node")


def test_a_hopeless_search_gives_up_with_a_reason() -> None:
    # 8 MIG-less GPUs, count 3, a constraint no pair meets: permutation search would try 8*7 + 8 devices.
    paired = _claim(
        [{"name": "gpus", "exactly": {"deviceClassName": NVIDIA, "count": 3}}],
        constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
    )
    search = Search([paired], _classes(), _eks(EKS_171), max_tries=20)
    with pytest.raises(AllocationError, match="search stopped after 20 device tries"):
        next(search.solutions(), None)


def test_best_fit_keeps_the_first_alternative_that_fits() -> None:
    # Scoring never promotes a later firstAvailable alternative: the cell-0 alternative comes first, so it
    # is used even though cell 1 is preferred and the second alternative could reach it.
    inventory = _inventory(FIXTURES / "alloc_nvswitch_8gpu.yaml", "nvswitch-node")
    topology = _joined(nvswitch_node(), inventory)
    cell_0 = "['0000:18:00.0', '0000:29:00.0', '0000:3a:00.0', '0000:4b:00.0']"
    low = {"cel": {"expression": f"device.attributes['resource.kubernetes.io'].pciBusID in {cell_0}"}}
    claim = _claim(
        [
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "low", "deviceClassName": NVIDIA, "selectors": [low]},
                    {"name": "any", "deviceClassName": NVIDIA},
                ],
            }
        ]
    )
    best = best_fit([claim], classes=_classes(), inventory=inventory, topology=topology, preferred_numa=1)
    assert isinstance(best, BestFit)
    assert _picked(best.allocation) == [("gpu/low", "gpu-0")]
    assert best.score.numa == 0


# --- counters shared by devices of several nodes (the service's cache) ----------------------------------


def _shared_counter_pool() -> list[dict[str, Any]]:
    """One pool whose counter set is drawn by a MIG device published for node-a and one for node-b."""

    def piece(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        pool = {"name": "shared", "generation": 1, "resourceSliceCount": 3}
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": "gpu.nvidia.com", "pool": pool, **spec},
        }

    def mig(name: str) -> dict[str, Any]:
        draws = {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "8"}}}
        return {"name": name, "attributes": {"type": {"string": "mig"}}, "consumesCounters": [draws]}

    counters = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "8"}}}]
    return [
        piece("counters", {"allNodes": True, "sharedCounters": counters}),
        piece("node-a-migs", {"nodeName": "node-a", "devices": [mig("mig-a")]}),
        piece("node-b-migs", {"nodeName": "node-b", "devices": [mig("mig-b")]}),
    ]


def _mig_claim(name: str, device: str | None = None) -> ResourceClaim:
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}},
    }
    if device is not None:
        result = {"request": "r", "driver": "gpu.nvidia.com", "pool": "shared", "device": device}
        claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    return parse_resource_claim(claim)


def test_the_service_counts_counters_drawn_by_a_device_of_another_node() -> None:
    """DRA-lib allocator_incubating.go: checkAvailableCounters subtracts the counters of allocated devices
    in the pool's slices for other nodes too (DeviceSlicesNotTargetingNode). The service's inventory of
    node-a counted node-a's devices only and gave mig-a although mig-b on node-b had drawn the whole set
    (found by the upstream oracle, tests/upstream/test_oracle_dra.py); and the inventory kept for node-a must change
    when a device of node-b drawing on the same counters is allocated."""
    state = DraState(threading.RLock())
    for item in _shared_counter_pool():
        state.set_slice(item["metadata"]["name"], parse_resource_slice(item))
    mig_class = DeviceClass("mig.nvidia.com", ("device.attributes['gpu.nvidia.com'].type == 'mig'",))
    state.set_class(mig_class.name, mig_class)
    wanted = (_mig_claim("wants-one"),)
    before = first_fit(wanted, classes=state.classes, inventory=state.inventory("node-a", {}))
    assert isinstance(before, Allocation)
    assert [c.device.ref.device for c in before.claims[0].devices] == ["mig-a"]

    state.set_claim(_mig_claim("on-node-b", "mig-b"))
    after = first_fit(wanted, classes=state.classes, inventory=state.inventory("node-a", {}))
    assert isinstance(after, Unallocatable)
    assert not after.error

    freed = state.inventory_without("node-a", {}, frozenset({DeviceRef("gpu.nvidia.com", "shared", "mig-b")}))
    again = first_fit(wanted, classes=state.classes, inventory=freed)
    assert isinstance(again, Allocation)


# --- what the upstream oracle found (tests/upstream/test_oracle_dra.py) ------------------------------------------


def _piece(name: str, pool: str, spec: dict[str, Any], *, count: int = 1) -> dict[str, Any]:
    """A ResourceSlice of ``pool`` (generation 1, ``count`` slices) of the GPU driver."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": NVIDIA, "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}, **spec},
    }


def _gpu(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": "gpu"}}, **fields}


def _nvidia_class() -> dict[str, DeviceClass]:
    return {NVIDIA: DeviceClass(NVIDIA, ("device.attributes['gpu.nvidia.com'].type == 'gpu'",))}


def _pools(*pieces: dict[str, Any]) -> tuple[Pool, ...]:
    return gather_pools(parse_resource_slice(p) for p in pieces)


def test_first_fit_walks_a_pools_slices_by_name() -> None:
    """DRA-lib pools_incubating.go: buildPool sorts a pool's slices by name before the search walks them."""
    pools = _pools(
        _piece("b-slice", "p", {"nodeName": "node-a", "devices": [_gpu("gpu-b")]}, count=2),
        _piece("a-slice", "p", {"nodeName": "node-a", "devices": [_gpu("gpu-a")]}, count=2),
    )
    result = first_fit([_gpus(1)], classes=_nvidia_class(), inventory=node_inventory(pools, "node-a", {}))
    assert isinstance(result, Allocation)
    assert [c.device.ref.device for c in result.claims[0].devices] == ["gpu-a"]


def test_a_selector_failing_only_on_a_device_the_search_never_tried_is_no_error() -> None:
    """Upstream evaluates selectors only on the devices its search tries: when the first claim cannot be
    served, the second claim's selector never runs, and the answer is "does not fit", not its error."""
    pools = _pools(_piece("s", "p", {"nodeName": "node-a", "devices": [_gpu("gpu-0")]}))
    failing = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"  # no such key on a GPU
    claims = [_gpus(2), _gpus(1, selectors=[{"cel": {"expression": failing}}])]
    result = first_fit(claims, classes=_nvidia_class(), inventory=node_inventory(pools, "node-a", {}))
    assert isinstance(result, Unallocatable)
    assert not result.error
    assert "a selector fails on a device the search did not reach" in result.reason


def test_all_devices_meets_the_pools_in_order_selectors_before_an_unusable_pool() -> None:
    """DRA-lib validateDeviceRequest walks the pools in (driver, name) order: a selector error in pool "a"
    comes before pool "b" being mid-update."""
    pools = _pools(
        _piece("a", "a", {"nodeName": "node-a", "devices": [_gpu("gpu-0")]}),
        _piece("b", "b", {"nodeName": "node-a", "devices": [_gpu("gpu-1")]}, count=2),
    )
    failing = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    claim = _claim(
        [
            {
                "name": "all",
                "exactly": {
                    "deviceClassName": NVIDIA,
                    "allocationMode": "All",
                    "selectors": [{"cel": {"expression": failing}}],
                },
            }
        ]
    )
    result = first_fit([claim], classes=_nvidia_class(), inventory=node_inventory(pools, "node-a", {}))
    assert isinstance(result, Unallocatable)
    assert result.error
    assert "no such key" in result.reason


def test_an_incomplete_pool_whose_counter_slice_selects_the_node_fails_all_devices() -> None:
    """DRA-lib GatherPools takes a counter slice that selects the node, so its pool (here mid-update, and
    with no device for this node) counts for an ``All`` request: "resource pool ... is currently being
    updated"."""
    counters = [{"name": "set", "counters": {"memory": {"value": "8"}}}]
    pools = _pools(
        _piece("devices", "p", {"nodeName": "node-b", "devices": [_gpu("gpu-0")]}, count=3),
        _piece("counters", "p", {"nodeName": "node-a", "sharedCounters": counters}, count=3),
        _piece("local", "local", {"nodeName": "node-a", "devices": [_gpu("gpu-1")]}),
    )
    claim = _claim([{"name": "all", "exactly": {"deviceClassName": NVIDIA, "allocationMode": "All"}}])
    result = first_fit([claim], classes=_nvidia_class(), inventory=node_inventory(pools, "node-a", {}))
    assert isinstance(result, Unallocatable)
    assert result.reason.endswith("asks for all devices, but resource pool gpu.nvidia.com/p is currently being updated")


def test_a_counter_overdrawn_by_allocated_devices_refuses_every_counter_drawing_device_of_the_pool() -> None:
    """DRA-lib checkAvailableCounters checks every counter of the device's pool, not only those it draws:
    once allocated devices overdrew one, no device drawing counters of that pool fits."""
    sets = [{"name": n, "counters": {"memory": {"value": "8"}}} for n in ("set-0", "set-1")]

    def draws(counter_set: str, amount: str) -> dict[str, Any]:
        return {"consumesCounters": [{"counterSet": counter_set, "counters": {"memory": {"value": amount}}}]}

    devices = [
        _gpu("gpu-0", **draws("set-0", "8")),
        _gpu("mig-0", **draws("set-0", "1")),
        _gpu("gpu-1", **draws("set-1", "8")),
    ]
    pools = _pools(
        _piece("devices", "p", {"nodeName": "node-a", "devices": devices}, count=2),
        _piece("counters", "p", {"nodeName": "node-a", "sharedCounters": sets}, count=2),
    )
    results = [{"request": "r", "driver": NVIDIA, "pool": "p", "device": d} for d in ("gpu-0", "mig-0")]
    earlier = parse_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "earlier", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": NVIDIA}}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )
    inventory = node_inventory(pools, "node-a", {}, claims=[earlier])
    result = first_fit([_gpus(1)], classes=_nvidia_class(), inventory=inventory)
    assert isinstance(result, Unallocatable)


def test_best_fit_is_not_refused_for_a_selector_failing_past_first_fits_answer() -> None:
    """Upstream stops at its first solution and never evaluates the selector on the MIG device after it;
    best fit, which looks further, keeps the solutions met before the error instead of refusing the pod."""
    mig = {"name": "mig-0", "attributes": {"type": {"string": "mig"}}}
    pools = _pools(
        _piece(
            "s",
            "p",
            {
                "nodeName": "node-a",
                "devices": [
                    _gpu("gpu-0", attributes={"type": {"string": "gpu"}, "driverVersion": {"version": "580.105.8"}}),
                    mig,
                ],
            },
        )
    )
    newer = "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('570.0.0'))"  # no key on mig-0
    claim = _claim(
        [{"name": "any", "exactly": {"deviceClassName": "any", "selectors": [{"cel": {"expression": newer}}]}}]
    )
    classes = {"any": DeviceClass("any", ())}
    inventory = node_inventory(pools, "node-a", {})
    first = first_fit([claim], classes=classes, inventory=inventory)
    assert isinstance(first, Allocation)
    best = best_fit([claim], classes=classes, inventory=inventory)
    assert isinstance(best, BestFit)
    assert [c.device.ref.device for c in best.allocation.claims[0].devices] == ["gpu-0"]
    assert best.truncated
