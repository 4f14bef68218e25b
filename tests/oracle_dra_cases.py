"""Cases for the DRA allocator oracle (tests/oracles/dra): random clusters of ResourceSlices, DeviceClasses
and claims shaped like ../shared/data/dra, the product's answer for them, and both answers normalised.

A case is what tests/oracles/dra/main.go reads: ``node``, ``slices``, ``classes``, ``claims`` (one pod's,
to allocate) and ``allocated`` (the cluster's allocated claims), all ``resource.k8s.io/v1`` objects as the
API serves them. The product's side goes the service's way: the objects through its readers
(``parse_resource_slice``, ``parse_device_class``, ``parse_resource_claim``) into a ``DraState`` (the
service's cache: pools, holds, per-node inventories), then ``first_fit`` on the node's inventory as
Filter does, and ``best_fit`` as Score and Reserve do.

Device attributes follow the captures (EKS H100 ResourceSlices: productName, uuid, pciBusID, pcieRoot,
driverVersion, memory capacity; the NVIDIA driver's MIG devices: parentUUID, profile, memory, counters
of the parent GPU drawn as partitionable devices on a separate counter slice), read from the data where
it is present (``real_gpu_attributes``).
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml
from hypothesis import strategies as st

from placement.core.dra.allocation import allocation_result
from placement.core.dra.best_fit import BestFit, best_fit
from placement.core.dra.cel import compile_selector
from placement.core.dra.claims import ClaimError, parse_device_class, parse_resource_claim
from placement.core.dra.device_types import SliceError
from placement.core.dra.first_fit import Allocation, Unallocatable, first_fit
from placement.core.dra.slices import parse_resource_slice
from placement.state.dra_state import DraState
from tests.conftest import SHARED_DATA
from tests.oracle_process import Oracle, OracleRefused

_T = TypeVar("_T")
NODE = "node-a"
OTHER_NODE = "node-b"
GPU_DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
_DRA_DATA = SHARED_DATA / "dra"
_DATA = _DRA_DATA / "resourceslices"
_CLASSES = _DRA_DATA / "deviceclasses"
_H100_CAPTURE = "nvidia-gpu_h100-80gb-hbm3_eks_ip-10-0-171-111_k8s-v1.35.yaml"


def real_gpu_attributes() -> list[dict[str, Any]]:
    """The attributes of the captured EKS H100 GPUs (../shared/data/dra), or one in-test GPU of that shape."""
    path = _DATA / _H100_CAPTURE
    if path.is_file():
        captured = yaml.safe_load(path.read_text())
        return [d["attributes"] for d in captured["spec"]["devices"]]
    return [
        {
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "driverVersion": {"version": "580.105.8"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:64:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:55"},
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-bc5610b9-79c8-fedd-8899-07539c7f868a"},
        }
    ]


_REAL = real_gpu_attributes()
PRODUCTS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB")
MEMORY = {"NVIDIA H100 80GB HBM3": "81559Mi", "NVIDIA A100-SXM4-80GB": "80Gi", "NVIDIA A100-SXM4-40GB": "40Gi"}
PCIE_ROOTS = ("pci0000:44", "pci0000:55", "pci0000:66")
MIG_PROFILES = (("1g.10gb", "9856Mi", 1), ("2g.20gb", "19968Mi", 2), ("3g.40gb", "40192Mi", 4))


def _device_class(name: str, expression: str) -> dict[str, Any]:
    """The NVIDIA driver's DeviceClass as the data renders it (deviceclasses/), else this in-test shape."""
    path = _CLASSES / f"nvidia-DERIVED-render_DeviceClass_{name}.yaml"
    if path.is_file():
        rendered: dict[str, Any] = yaml.safe_load(path.read_text())
        return rendered
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


_NVIDIA = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type"
_CHANNEL = "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type"
CLASSES: list[dict[str, Any]] = [
    _device_class("gpu.nvidia.com", f"{_NVIDIA} == 'gpu'"),
    _device_class("mig.nvidia.com", f"{_NVIDIA} == 'mig'"),
    _device_class("compute-domain-default-channel.nvidia.com", f"{_CHANNEL} == 'channel'"),
    # Anything of the GPU driver (no type check): GPUs and MIG devices compete.
    _device_class("any.nvidia.com", "device.driver == 'gpu.nvidia.com'"),
]
CLASS_NAMES = [c["metadata"]["name"] for c in CLASSES] + ["missing.example.com"]

# Request selectors: the captures' and tutorials' shapes, plus ones that fail at runtime (a missing key) or
# that the CEL type system refuses (a macro over a string).
SELECTORS = (
    "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
    "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0",
    "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('20Gi'))",
    "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('570.0.0'))",
    "device.attributes['resource.kubernetes.io'].pcieRoot.startsWith('pci0000:4')",
    "'pcieRoot' in device.attributes['resource.kubernetes.io']",
    "has(device.attributes['gpu.nvidia.com'].profile) && device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
    "device.attributes['gpu.nvidia.com'].profile == '2g.20gb'",  # a runtime error on a full GPU
    "device.attributes['gpu.nvidia.com'].uuid.split('-').exists(p, p.size() == 4)",
    "device.attributes['gpu.nvidia.com'].exists(k, k == 'parentUUID')",
    "['gpu', 'mig'].all(t, t.size() == 3)",
    "device.attributes['gpu.nvidia.com'].productName.exists(c, c == 'N')",  # a macro over a string
    "device.attributes['gpu.nvidia.com'].uuid.all(c, c != 'x')",
    "device.attributes['gpu.nvidia.com'].type.exists_one(c, c == 'g')",
    "size(device.attributes['gpu.nvidia.com'].productName.filter(c, c == 'A')) > 0",
    "device.attributes['gpu.nvidia.com'].productName.map(c, c).size() > 0",
    "device.attributes['gpu.nvidia.com'].productName.matches('H100') || device.attributes['gpu.nvidia.com'].uuid != ''",
)
# cel-python raises the interpreter's recursion limit when its environment is first built; build it now, not
# inside a hypothesis test (which refuses a limit changed under it).
compile_selector(SELECTORS[0])
CONSTRAINT_ATTRIBUTES = (
    "gpu.nvidia.com/productName",
    "resource.kubernetes.io/pcieRoot",
    "gpu.nvidia.com/parentUUID",
    "gpu.nvidia.com/uuid",
    "gpu.nvidia.com/cliqueID",
)
TAINT_KEYS = ("nvidia.com/unhealthy", "example.com/maintenance")


# --- strategies ----------------------------------------------------------------------------------------


class Pick:
    """Where a case's choices come from: hypothesis draws (the fixed-seed lane: shrinkable, so a divergence
    prints a small case) or a seeded ``random.Random`` (deep mode: one draw per case, several times
    faster; a divergence prints the whole case)."""

    def __init__(self, draw: st.DrawFn | None = None, rng: random.Random | None = None) -> None:
        self._draw = draw
        self._rng = rng

    def integer(self, low: int, high: int) -> int:
        if self._draw is not None:
            return self._draw(st.integers(low, high))
        assert self._rng is not None
        return self._rng.randint(low, high)

    def one(self, options: Sequence[_T]) -> _T:
        return options[self.integer(0, len(options) - 1)]

    def chance(self, one_in: int) -> bool:
        """True once in ``one_in``."""
        return self.integer(0, one_in - 1) == 0

    def some(self, options: Sequence[_T], *, least: int = 0, most: int | None = None) -> list[_T]:
        """Distinct options, in a drawn order."""
        pool = list(options)
        chosen: list[_T] = []
        for _ in range(self.integer(least, min(len(pool), len(pool) if most is None else most))):
            chosen.append(pool.pop(self.integer(0, len(pool) - 1)))
        return chosen


@dataclass
class _Names:
    """Counters for unique names inside one case."""

    gpu: int = 0
    slice: int = 0


def _attr(value: str | int | bool, kind: str = "string") -> dict[str, Any]:
    return {kind: value}


def gpu_device(pick: Pick, names: _Names, *, counter_set: str | None) -> tuple[dict[str, Any], str, str]:
    """A full GPU as the NVIDIA driver publishes it (a captured one's attributes, product varied); with
    ``counter_set`` it draws the whole GPU's counters (dynamic MIG: the GPU and its partitions share them)."""
    index = names.gpu
    names.gpu += 1
    real = _REAL[index % len(_REAL)]
    # One choice for the product, the PCIe root and the NVLink clique (none, 1, 2).
    variant = pick.integer(0, len(PRODUCTS) * len(PCIE_ROOTS) * 3 - 1)
    product = PRODUCTS[variant % len(PRODUCTS)]
    root = PCIE_ROOTS[variant // len(PRODUCTS) % len(PCIE_ROOTS)]
    clique = variant // (len(PRODUCTS) * len(PCIE_ROOTS))
    uuid = f"GPU-{index:08x}-79c8-fedd-8899-07539c7f868a"
    attributes = {k: v for k, v in real.items() if k not in ("uuid", "productName")}
    attributes["uuid"] = _attr(uuid)
    attributes["productName"] = _attr(product)
    attributes["type"] = _attr("gpu")
    attributes["resource.kubernetes.io/pcieRoot"] = _attr(root)
    if clique:
        attributes["cliqueID"] = _attr(f"clique-{clique}")
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": attributes,
        "capacity": {"memory": {"value": MEMORY[product]}},
    }
    if counter_set is not None:
        device["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {"memory": {"value": "8"}, "multiprocessors": {"value": "7"}}}
        ]
    _taints(pick, device)
    return device, uuid, product


def mig_device(pick: Pick, parent: tuple[str, str, str], placement: int, *, counter_set: str | None) -> dict[str, Any]:
    """A MIG device of the parent GPU (name, uuid, product), drawing memory slices from its counter set."""
    name, uuid, product = parent
    profile, memory, slices = pick.one(MIG_PROFILES)
    device: dict[str, Any] = {
        "name": f"{name}-mig-{profile.replace('.', '')}-{placement}",
        "attributes": {
            "type": _attr("mig"),
            "parentUUID": _attr(uuid),
            "profile": _attr(profile),
            "productName": _attr(product),
            "uuid": _attr(f"MIG-{uuid[4:]}-{placement}"),
        },
        "capacity": {"memory": {"value": memory}},
    }
    if counter_set is not None:
        device["consumesCounters"] = [
            {
                "counterSet": counter_set,
                "counters": {"memory": {"value": str(slices)}, "multiprocessors": {"value": str(slices)}},
            }
        ]
    _taints(pick, device)
    return device


_TAINTS = [
    {"key": key, "value": value, "effect": effect}
    for key in TAINT_KEYS
    for value in ("", "true")
    for effect in ("NoSchedule", "NoExecute", "None")
]


def _taints(pick: Pick, device: dict[str, Any]) -> None:
    """One device in six is tainted (any key, value and effect: one choice)."""
    choice = pick.integer(0, len(_TAINTS) * 6 - 1)
    if choice < len(_TAINTS):
        device["taints"] = [dict(_TAINTS[choice])]


def _where(pick: Pick) -> dict[str, Any]:
    """A slice's node selection: mostly this node, else the other node, all nodes or a label selector."""
    choice = pick.one(("node", "node", "node", "other", "all", "selector"))
    if choice == "node":
        return {"nodeName": NODE}
    if choice == "other":
        return {"nodeName": OTHER_NODE}
    if choice == "all":
        return {"allNodes": True}
    clique = pick.one(("c1", "c2"))
    return {
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": CLIQUE_LABEL, "operator": "In", "values": [clique]}]}]
        }
    }


def _slice(name: str, driver: str, pool: tuple[str, int, int], spec: dict[str, Any]) -> dict[str, Any]:
    """A ResourceSlice of ``pool`` (name, generation, resourceSliceCount)."""
    pool_name, generation, count = pool
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": pool_name, "generation": generation, "resourceSliceCount": count},
            **spec,
        },
    }


def gpu_pool(pick: Pick, names: _Names, pool: str) -> list[dict[str, Any]]:
    """One pool of the GPU driver: one or two device slices, and with partitionable devices a counter slice
    whose counter sets (one per GPU) its GPUs and their MIG devices draw from; sometimes a leftover slice of
    an older generation, sometimes a slice missing (the pool incomplete), sometimes a counter set named
    twice (the pool invalid)."""
    partitionable = pick.chance(2)
    generation = pick.integer(1, 2)
    device_slices: list[list[dict[str, Any]]] = []
    counter_sets: list[dict[str, Any]] = []
    for _ in range(pick.integer(1, 2)):
        devices: list[dict[str, Any]] = []
        for _ in range(pick.integer(1, 3)):
            counter_set = f"{pool}-gpu-{names.gpu}-counters" if partitionable else None
            gpu, uuid, product = gpu_device(pick, names, counter_set=counter_set)
            if counter_set is not None:
                counter_sets.append(
                    {"name": counter_set, "counters": {"memory": {"value": "8"}, "multiprocessors": {"value": "7"}}}
                )
            devices.append(gpu)
            for placement in range(pick.integer(0, 3) if partitionable else 0):
                devices.append(mig_device(pick, (gpu["name"], uuid, product), placement, counter_set=counter_set))
        device_slices.append(devices)
    specs: list[dict[str, Any]] = []
    per_device = pick.chance(7)
    for devices in device_slices:
        if per_device:
            for device in devices:
                device.update(_where(pick))
            specs.append({"perDeviceNodeSelection": True, "devices": devices})
        else:
            specs.append({**_where(pick), "devices": devices})
    if counter_sets:
        if pick.chance(9) and len(counter_sets) > 1:  # one set declared in two slices: invalid
            specs.append({**_where(pick), "sharedCounters": [dict(counter_sets[0])]})
        specs.append({**_where(pick), "sharedCounters": counter_sets})
    count = len(specs)
    published = specs
    if pick.chance(11) and count > 1:  # the driver is mid-update: a slice not there yet
        published = specs[:-1]
    slices = []
    for spec in published:
        names.slice += 1
        slices.append(_slice(f"{pool}-slice-{names.slice}", GPU_DRIVER, (pool, generation, count), spec))
    if generation == 2 and pick.chance(2):  # a leftover of generation 1, of a pool of one or two slices
        names.slice += 1
        old = gpu_device(pick, names, counter_set=None)[0]
        of = pick.integer(1, 2)
        slices.append(
            _slice(f"{pool}-slice-{names.slice}", GPU_DRIVER, (pool, 1, of), {**_where(pick), "devices": [old]})
        )
    return slices


def _applies(spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether upstream's GatherPools takes a slice for ``NODE`` (the shapes ``_where`` makes)."""
    if spec.get("perDeviceNodeSelection"):
        return any(_applies(d, labels) for d in spec.get("devices", []))
    if "nodeSelector" in spec:
        (term,) = spec["nodeSelector"]["nodeSelectorTerms"]
        (requirement,) = term["matchExpressions"]
        return labels.get(requirement["key"]) in requirement["values"]
    return bool(spec.get("allNodes")) or spec.get("nodeName") == NODE


_ON_DEVICE = re.compile(r"on device ([^/\s]+)/([^/\s]+)/([^:\s]+):")


def selector_failed_off_node(case: Mapping[str, Any], upstream: Verdict) -> bool:
    """Whether upstream's error is a selector failing on a device that cannot be used on ``NODE``: a
    ``perDeviceNodeSelection`` slice with a device for the node is taken whole, and DRA-lib's isSelectable
    (allocator_incubating.go) runs the selectors before the device's own node selection; the product
    judges only the devices the node may use (docs/dra.md, "Checked against upstream"). Such cases are
    left out of the comparison."""
    found = _ON_DEVICE.search(upstream.text) if upstream.outcome == "error" else None
    if found is None:
        return False
    driver, pool, device = found.groups()
    labels = _labels(case)
    for item in case["slices"]:
        spec = item["spec"]
        if spec["driver"] != driver or spec["pool"]["name"] != pool or not spec.get("perDeviceNodeSelection"):
            continue
        for entry in spec.get("devices", []):
            if entry["name"] == device and not _applies(entry, labels):
                return True
    return False


def stale_generation_used(case: Mapping[str, Any]) -> bool:
    """Whether upstream would allocate from an older generation of a pool on ``NODE``: when none of the
    newest generation's slices target the node but all of an older one's do (count equal to its
    ``resourceSliceCount``), DRA-lib's GatherPools (pools_incubating.go) finds that older pool complete
    and uses it; the product never uses a generation older than the pool's newest (docs/dra.md,
    "Checked against upstream"). Such cases are left out of the comparison."""
    labels = _labels(case)
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for item in case["slices"]:
        spec = item["spec"]
        pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    for specs in pools.values():
        newest = max(s["pool"]["generation"] for s in specs)
        targeting = [s for s in specs if _applies(s, labels)]
        if not targeting:
            continue
        seen = max(s["pool"]["generation"] for s in targeting)
        at_seen = [s for s in targeting if s["pool"]["generation"] == seen]
        if seen < newest and len(at_seen) == at_seen[0]["pool"]["resourceSliceCount"]:
            return True
    return False


def compute_domain_pool(node: str) -> dict[str, Any]:
    """The compute-domain driver's per-node pool as the EKS captures show it (a channel and a daemon)."""
    devices = [
        {"name": "channel-0", "attributes": {"type": _attr("channel"), "id": _attr(0, "int")}},
        {"name": "daemon-0", "attributes": {"type": _attr("daemon"), "id": _attr(0, "int")}},
    ]
    return _slice(f"{node}-compute-domain", CD_DRIVER, (node, 1, 1), {"nodeName": node, "devices": devices})


def exact_request(pick: Pick) -> dict[str, Any]:
    """What one request or one ``firstAvailable`` alternative asks: a class (rarely one that does not exist),
    a count or All, maybe a selector and a toleration."""
    request: dict[str, Any] = {"deviceClassName": pick.one(CLASS_NAMES if pick.chance(31) else CLASS_NAMES[:4])}
    if pick.chance(9):
        request["allocationMode"] = "All"
    else:
        request["allocationMode"] = "ExactCount"
        request["count"] = pick.one((1, 1, 1, 2, 2, 3))
    if pick.chance(3):
        request["selectors"] = [{"cel": {"expression": pick.one(SELECTORS)}}]
    if pick.chance(4):
        key = pick.one((*TAINT_KEYS, None))
        toleration: dict[str, Any] = {"operator": pick.one(("Exists", "Equal"))}
        if key is not None:
            toleration["key"] = key
        elif toleration["operator"] == "Equal":
            toleration["key"] = TAINT_KEYS[0]
        if toleration["operator"] == "Equal":
            toleration["value"] = pick.one(("", "true"))
        effect = pick.one((None, "NoSchedule", "NoExecute"))
        if effect is not None:
            toleration["effect"] = effect
        request["tolerations"] = [toleration]
    return request


def resource_claim(pick: Pick, name: str) -> dict[str, Any]:
    """A claim of one or two requests (``exactly`` or ``firstAvailable`` alternatives) with constraints
    naming requests or alternatives."""
    requests: list[dict[str, Any]] = []
    names: list[str] = []
    for index in range(pick.integer(1, 2)):
        if pick.chance(4):
            subs = [{"name": f"alt{i}", **exact_request(pick)} for i in range(pick.integer(1, 3))]
            requests.append({"name": f"req{index}", "firstAvailable": subs})
            names.extend(f"req{index}/{sub['name']}" for sub in subs)
        else:
            requests.append({"name": f"req{index}", "exactly": exact_request(pick)})
        names.append(f"req{index}")
    spec: dict[str, Any] = {"devices": {"requests": requests}}
    constraints = []
    for _ in range(pick.integer(0, 2) if pick.chance(2) else 0):
        kind = pick.one(("matchAttribute", "distinctAttribute"))
        constraint: dict[str, Any] = {kind: pick.one(CONSTRAINT_ATTRIBUTES)}
        chosen = pick.some(names, most=2)
        if chosen:
            constraint["requests"] = chosen
        constraints.append(constraint)
    if constraints:
        spec["devices"]["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
    }


def _devices_of(slices: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in slices
        for d in s["spec"].get("devices", [])
    ]


def build_case(pick: Pick) -> dict[str, Any]:
    """A node, the cluster's slices and allocated claims, and one pod's claims to allocate."""
    names = _Names()
    slices: list[dict[str, Any]] = []
    for number in range(pick.integer(1, 3)):
        slices.extend(gpu_pool(pick, names, f"pool-{number}"))
    if pick.chance(2):
        slices.append(compute_domain_pool(NODE))
    claims = [resource_claim(pick, f"claim-{i}") for i in range(pick.integer(1, 2))]
    allocated = []
    devices = sorted(set(_devices_of(slices)))
    if devices and pick.chance(2):
        taken = pick.some(devices, least=1, most=4)
        results = [{"request": "r", "driver": driver, "pool": pool, "device": device} for driver, pool, device in taken]
        allocated.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "earlier", "namespace": "default", "uid": "uid-earlier"},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "any.nvidia.com"}}]}},
                "status": {"allocation": {"devices": {"results": results}}},
            }
        )
    labels = {"kubernetes.io/hostname": NODE, CLIQUE_LABEL: pick.one(("c1", "c2"))}
    return {
        "node": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": labels}},
        "slices": slices,
        "classes": CLASSES,
        "claims": claims,
        "allocated": allocated,
    }


@st.composite
def _drawn_case(draw: st.DrawFn) -> dict[str, Any]:
    return build_case(Pick(draw=draw))


def dra_cases(*, seeded: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Cases drawn choice by choice (shrinkable), or ``seeded``: each from one drawn seed (fast, deep mode)."""
    if seeded:
        return st.integers(0, 2**64 - 1).map(lambda seed: build_case(Pick(rng=random.Random(seed))))
    return _drawn_case()


# --- the product's answer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """An answer normalised for comparison: ``allocated`` with the devices per claim, ``unsatisfiable``, or
    ``error`` with its kind (``ERROR_KINDS``) and text."""

    outcome: str
    devices: tuple[tuple[tuple[str, str, str, str], ...], ...] = ()  # per claim: (request, driver, pool, device)
    error_kind: str = ""
    text: str = ""


# What an error is about, by its text on either side; compared by kind, not word for word.
ERROR_KINDS = (
    ("class", re.compile(r"device class .*(does not exist|could not retrieve|not found)|deviceclass", re.I)),
    ("all-pool", re.compile(r"asks for all devices, but resource pool", re.I)),
    ("limit", re.compile(r"claim limit|exceeds", re.I)),
    ("selector", re.compile(r"CEL|selector|no such key|no matching overload|expression|cannot be range", re.I)),
    ("constraint", re.compile(r"constraint", re.I)),
)


def error_kind(text: str) -> str:
    return next((kind for kind, pattern in ERROR_KINDS if pattern.search(text)), "other")


def product_state(case: Mapping[str, Any]) -> DraState:
    """The service's DRA cache holding the case's slices, classes and allocated claims."""
    state = DraState(threading.RLock())
    state.served = True
    for item in case["slices"]:
        state.set_slice(item["metadata"]["name"], parse_resource_slice(item))
    for item in case["classes"]:
        state.set_class(item["metadata"]["name"], parse_device_class(item))
    for item in case["allocated"]:
        state.set_claim(parse_resource_claim(item))
    return state


def _labels(case: Mapping[str, Any]) -> dict[str, str]:
    return dict(case["node"]["metadata"].get("labels") or {})


def product_answer(case: Mapping[str, Any], *, best: bool = False) -> Verdict:
    """The product's first fit (``best``: best fit) for the case's claims on its node, through the service's
    cache; a reader's refusal is an ``error`` of kind ``reader``."""
    try:
        state = product_state(case)
        claims = tuple(parse_resource_claim(c) for c in case["claims"])
    except (SliceError, ClaimError) as refused:
        return Verdict("error", error_kind="reader", text=str(refused))
    node = case["node"]["metadata"]["name"]
    inventory = state.inventory(node, _labels(case))
    answer: Allocation | BestFit | Unallocatable
    if best:
        answer = best_fit(claims, classes=state.classes, inventory=inventory)
    else:
        answer = first_fit(claims, classes=state.classes, inventory=inventory)
    if isinstance(answer, Unallocatable):
        if answer.error:
            return Verdict("error", error_kind=error_kind(answer.reason), text=answer.reason)
        return Verdict("unsatisfiable", text=answer.reason)
    allocation = answer.allocation if isinstance(answer, BestFit) else answer
    return Verdict(
        "allocated",
        devices=tuple(_results(allocation_result(solution, node)) for solution in allocation.claims),
    )


def _results(allocation: Mapping[str, Any]) -> tuple[tuple[str, str, str, str], ...]:
    return tuple((r["request"], r["driver"], r["pool"], r["device"]) for r in allocation["devices"]["results"])


def ask_upstream(oracle: Oracle, case: Mapping[str, Any]) -> Mapping[str, Any]:
    """Upstream's answer for ``case``. A selector the 1.37 API server's CEL environment does not compile
    (a macro over a string attribute) cannot be written into a cluster now, but one stored under other
    rules is evaluated as it is: such a case is asked again as ``stored`` (no validation). Any other
    refusal means the strategies made an object no cluster holds, and is raised."""
    try:
        answer: Mapping[str, Any] = oracle.ask(dict(case))
    except OracleRefused as refused:
        if "compilation failed" not in str(refused):
            raise
        answer = oracle.ask({**case, "stored": True})
    return answer


def oracle_verdict(answer: Mapping[str, Any]) -> Verdict:
    """Upstream's answer normalised (the implementation that ran must be "incubating", the one kube-scheduler
    1.37 runs with its default feature gates): an error that concerns this node only (``ErrFailedAllocationOnNode``,
    e.g. "invalid resource pools were encountered") refuses the node as kube-scheduler's Filter does, so
    it counts as ``unsatisfiable``."""
    assert answer["allocator"] == "incubating", f"upstream ran the {answer['allocator']} allocator"
    outcome = answer["outcome"]
    if outcome == "error":
        if answer.get("nodeOnly"):
            return Verdict("unsatisfiable", text=answer["error"])
        return Verdict("error", error_kind=error_kind(answer["error"]), text=answer["error"])
    if outcome == "unsatisfiable":
        return Verdict("unsatisfiable")
    return Verdict(
        "allocated",
        devices=tuple(_results(result) for result in answer["results"]),
    )


def verification_case(case: Mapping[str, Any], verdict: Verdict) -> dict[str, Any]:
    """The case reduced to the devices ``verdict`` chose (plus every allocated one, whose counters still
    count): upstream finds a solution there only if the chosen devices can serve the claims. Requests for
    ``All`` devices are left as they are (the reduction would change what "all" means)."""
    chosen = {(driver, pool, device) for claim in verdict.devices for _, driver, pool, device in claim}
    taken = {
        (r["driver"], r["pool"], r["device"])
        for claim in case["allocated"]
        for r in claim["status"]["allocation"]["devices"]["results"]
    }
    keep = chosen | taken
    slices = []
    for item in case["slices"]:
        spec = item["spec"]
        if "devices" not in spec:
            slices.append(item)
            continue
        devices = [d for d in spec["devices"] if (spec["driver"], spec["pool"]["name"], d["name"]) in keep]
        slices.append({**item, "spec": {**spec, "devices": devices}})
    return {**case, "slices": slices}


def uses_all_mode(case: Mapping[str, Any]) -> bool:
    for claim in case["claims"]:
        for request in claim["spec"]["devices"]["requests"]:
            alternatives = request.get("firstAvailable") or [request.get("exactly", {})]
            if any(a.get("allocationMode") == "All" for a in alternatives):
                return True
    return False
