"""The kubelet v1.37.2's resource managers judge the admission model (tests/oracles/kubelet).

Random nodes shaped like the hwloc snapshots in shared/data (their NUMA ids, sparse ones too, CPUs and memory
per node, distances; SMT on or off, fewer CPUs per node for contention), GPUs laid out per NUMA node as in the
GPU captures (some without a NUMA node, some unhealthy), every Topology Manager policy and scope with its
options, the static CPU manager and the Static memory manager with their reservations; a few pods admitted
one after another (Guaranteed, Burstable and BestEffort; integral and fractional CPUs, memory, hugepages,
GPUs, init containers and sidecars), each judged by the kubelet and by the model on the state the kubelet
holds before it. Run as ``python -m pytest -m oracle tests/upstream/test_oracle_kubelet.py``; deep mode:
``KUBENEXUS_ORACLE_CASES=100000``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from placement.core.topology_manager.admission import (
    NUMA_ID_ABOVE_63,
    SPARSE_NUMA_DISTANCES_MESSAGE,
    TOPOLOGY_MANAGER_UNAVAILABLE,
    UNEXPECTED_ADMISSION_ERROR,
)
from tests.conftest import HWLOC_DIR
from tests.oracle_kubelet_cases import KUBELET_PANIC, Verdict, model_verdicts, oracle_verdicts
from tests.oracle_process import Oracle, OracleTimedOut, oracle_settings

pytestmark = pytest.mark.oracle

Json = Any
GIB = 1024**3
MIB = 1024**2
GPU = "nvidia.com/gpu"
NIC = "example.com/nic"
DEVICE_MANAGER_REFUSAL = re.compile(r"devices unavailable for |cannot allocate unhealthy devices ")


# --- machines ------------------------------------------------------------------------------------------------


def _snapshot_shapes(directory: Path) -> list[Json]:
    """(ids, CPUs per node, memory per node, distance rows or None) of each hwloc snapshot's NUMA nodes."""
    shapes = []
    for path in sorted(directory.glob("*.oracle.json")):
        document = json.loads(path.read_text())
        nodes = document.get("numa_nodes") or []
        if not nodes:
            continue
        ids = [int(n["os_index"]) for n in nodes]
        distances = document.get("distances") or {}
        rows = None
        if distances.get("os_indexes") == ids:
            rows = [[int(d) for d in row] for row in distances["matrix"]]
        shapes.append((ids, [len(n["cpus"]) for n in nodes], [int(n["local_memory_bytes"]) for n in nodes], rows))
    return shapes


def _fallback_shapes() -> list[Json]:
    return [
        ([0], [16], [64 * GIB], None),
        ([0, 1], [16, 16], [128 * GIB, 128 * GIB], [[10, 21], [21, 10]]),
        (
            [0, 1, 2, 3],
            [8] * 4,
            [32 * GIB] * 4,
            [[10 if a == b else 12 + 8 * ((a ^ b) >> 1) for b in range(4)] for a in range(4)],
        ),
        ([0, 1, 2, 3, 4, 5, 6, 7], [4] * 8, [16 * GIB] * 8, None),
    ]


SHAPES = _snapshot_shapes(HWLOC_DIR) if HWLOC_DIR.is_dir() else []
SHAPES = SHAPES or _fallback_shapes()
# Two-socket servers with their real distances, the shape GPU nodes have, weigh more than the exotic ones.
COMMON = [s for s in SHAPES if 2 <= len(s[0]) <= 4] or SHAPES


@st.composite
def machines(draw: st.DrawFn) -> Json:
    """cadvisor MachineInfo: NUMA nodes with cores (SMT: two threads each), memory, hugepages, distances."""
    ids, cpus, memory, rows = draw(st.one_of(st.sampled_from(COMMON), st.sampled_from(SHAPES)))
    # Every CPU of a node is kept on machines of up to 4 NUMA nodes only: on 8 nodes of 32 CPUs the kubelet
    # takes seconds per Guaranteed pod (its CPU and memory hints over 255 masks), which the fixed lane cannot.
    cap = draw(st.sampled_from([2, 4, 6, 8, 64] if len(ids) <= 4 else [2, 4, 6, 8]))
    smt = draw(st.booleans())
    scale = draw(st.sampled_from([1, 1, 4, 16]))  # smaller memory: pods of a few GiB contend for it
    topology = []
    next_cpu = 0
    for position, numa_id in enumerate(ids):
        count = min(cpus[position], cap)
        if smt and count % 2:
            count += 1 if cpus[position] else 0
        cores = []
        for _ in range(count // 2 if smt else count):
            threads = [next_cpu, next_cpu + 1] if smt else [next_cpu]
            # core_id is unique within a socket, as sysfs numbers them (cadvisor merges equal ids of a socket)
            cores.append({"core_id": next_cpu, "thread_ids": threads, "socket_id": position // 2})
            next_cpu += len(threads)
        total = memory[position] // scale // MIB * MIB
        hugepages = [
            {"page_size": 2048, "num_pages": draw(st.sampled_from([0, 0, 512, 2048]))},
            {"page_size": 1048576, "num_pages": draw(st.sampled_from([0, 0, 1, 4]))},
        ]
        pooled = sum(h["page_size"] * 1024 * h["num_pages"] for h in hugepages)
        if pooled > total // 2:
            hugepages = [{"page_size": h["page_size"], "num_pages": 0} for h in hugepages]
        node: Json = {"node_id": numa_id, "memory": total, "hugepages": hugepages, "cores": cores}
        if rows is not None:
            node["distances"] = rows[position]
        topology.append(node)
    return {
        "num_cores": next_cpu,
        "num_physical_cores": next_cpu // 2 if smt else next_cpu,
        "num_sockets": max(1, (len(ids) + 1) // 2),
        "topology": topology,
    }


# --- kubelets ------------------------------------------------------------------------------------------------


@st.composite
def kubelets(draw: st.DrawFn, machine: Json) -> Json:
    """A KubeletConfiguration the kubelet starts with (static CPU manager: some CPU reserved; Static memory
    manager: reservedMemory per NUMA node summing to the memory reservation)."""
    policy = draw(st.sampled_from(["none", "best-effort", "restricted", "single-numa-node"]))
    config: Json = {
        "topologyManagerPolicy": policy,
        "topologyManagerScope": draw(st.sampled_from(["container", "pod"])),
        "cpuManagerPolicy": draw(st.sampled_from(["none", "static", "static"])),
        "memoryManagerPolicy": draw(st.sampled_from(["None", "Static"])),
        "systemReserved": {},
    }
    options = {}
    if draw(st.booleans()):
        options["prefer-closest-numa-nodes"] = draw(st.sampled_from(["true", "false"]))
    if draw(st.integers(0, 9)) == 0:
        options["max-allowable-numa-nodes"] = draw(st.sampled_from(["8", "16"]))
    if options:
        config["topologyManagerPolicyOptions"] = options
    all_cpus = [t for n in machine["topology"] for c in n["cores"] for t in c["thread_ids"]]
    if config["cpuManagerPolicy"] == "static" and draw(st.booleans()) and all_cpus:
        config["reservedSystemCPUs"] = ",".join(map(str, all_cpus[: draw(st.integers(1, 2))]))
    else:
        config["systemReserved"]["cpu"] = draw(st.sampled_from(["1", "2", "500m", "1500m"]))
    if len(machine["topology"]) > 8:
        # Wider machines are covered by the Topology Manager refusing them; the Static memory manager would
        # weigh all 2^n NUMA masks for every Guaranteed container under policy none, on both sides.
        config["memoryManagerPolicy"] = "None"
    if config["memoryManagerPolicy"] == "Static":
        with_memory = [n for n in machine["topology"] if n["memory"] >= 2 * GIB]
        if not with_memory:
            config["memoryManagerPolicy"] = "None"
        else:
            chosen = draw(
                st.lists(st.sampled_from(with_memory), min_size=1, max_size=2, unique_by=lambda n: n["node_id"])
            )
            reserved = []
            for node in chosen:
                size = draw(st.sampled_from([256, 512, 1024])) * MIB
                reserved.append({"numaNode": node["node_id"], "limits": {"memory": str(size)}, "size": size})
            config["systemReserved"]["memory"] = str(sum(r.pop("size") for r in reserved))
            config["reservedMemory"] = reserved
    return config


@st.composite
def device_plugins(draw: st.DrawFn, machine: Json) -> list[Json]:
    """GPUs over the NUMA nodes with CPUs in blocks, as the GPU captures lay 8 GPUs over 2 or 4 nodes; some
    report no NUMA node, some are unhealthy. Now and then a second resource with few devices."""
    numa = [n["node_id"] for n in machine["topology"] if n["cores"]] or [n["node_id"] for n in machine["topology"]]
    plugins = []
    count = draw(st.sampled_from([0, 2, 4, 8, 8]))
    if count:
        devices = []
        for i in range(count):
            device: Json = {"ID": f"GPU-{i}", "health": "Unhealthy" if draw(st.integers(0, 9)) == 0 else "Healthy"}
            if draw(st.integers(0, 9)):
                device["topology"] = {"nodes": [{"ID": numa[i * len(numa) // count]}]}
            devices.append(device)
        plugins.append({"resource": GPU, "devices": devices})
    if draw(st.integers(0, 4)) == 0:
        nics = [
            {"ID": f"NIC-{i}", "health": "Healthy", "topology": {"nodes": [{"ID": draw(st.sampled_from(numa))}]}}
            for i in range(draw(st.integers(1, 2)))
        ]
        plugins.append({"resource": NIC, "devices": nics})
    return plugins


# --- pods ----------------------------------------------------------------------------------------------------


def _memory(size: int, odd: bool) -> str:
    if odd and size % GIB == 0:
        return f"{size // GIB}Gi"
    return str(size) if odd else f"{size // MIB}Mi"


@st.composite
def containers(draw: st.DrawFn, name: str, qos: str, machine: Json, init: bool) -> Json:
    per_numa = max(
        (len(n["cores"]) * (len(n["cores"][0]["thread_ids"]) if n["cores"] else 1) for n in machine["topology"]),
        default=1,
    )
    numa_memory = max((n["memory"] for n in machine["topology"]), default=GIB)
    requests: Json = {}
    limits: Json = {}
    if qos != "BestEffort":
        if draw(st.integers(0, 4)):
            cpus = draw(st.integers(1, max(1, per_numa + per_numa // 2)))
            requests["cpu"] = str(cpus)
        else:
            requests["cpu"] = draw(st.sampled_from(["500m", "1500m", "250m"]))
        fraction = draw(st.sampled_from([0.05, 0.1, 0.25, 0.5, 0.75, 1.2]))
        size = max(MIB, int(numa_memory * fraction) // MIB * MIB)
        requests["memory"] = _memory(size, draw(st.booleans()))
        if qos == "Guaranteed":
            limits = dict(requests)
            if draw(st.integers(0, 3)) == 0:
                hugepages = draw(st.sampled_from(["hugepages-2Mi", "hugepages-1Gi"]))
                amount = draw(
                    st.sampled_from(["2Mi", "64Mi", "1Gi"]) if hugepages == "hugepages-2Mi" else st.just("1Gi")
                )
                requests[hugepages] = limits[hugepages] = amount
        else:
            limits = {"memory": _memory(size * 2, False)} if draw(st.booleans()) else {}
    if draw(st.integers(0, 2)) == 0:
        gpus = str(draw(st.integers(1, 4)))
        requests[GPU] = limits[GPU] = gpus
    if draw(st.integers(0, 9)) == 0:
        requests[NIC] = limits[NIC] = "1"
    container: Json = {"name": name, "image": "busybox", "resources": {"requests": requests, "limits": limits}}
    if init and draw(st.integers(0, 2)) == 0:
        container["restartPolicy"] = "Always"
    return container


@st.composite
def pods(draw: st.DrawFn, name: str, machine: Json) -> Json:
    qos = draw(st.sampled_from(["Guaranteed", "Guaranteed", "Burstable", "BestEffort"]))
    init = [draw(containers(f"init{i}", qos, machine, True)) for i in range(draw(st.sampled_from([0, 0, 1, 2])))]
    app = [draw(containers(f"app{i}", qos, machine, False)) for i in range(draw(st.sampled_from([1, 1, 2, 3])))]
    spec: Json = {"containers": app}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


@st.composite
def kubelet_cases(draw: st.DrawFn) -> Json:
    machine = draw(machines())
    earlier = draw(st.integers(0, 3))
    return {
        "machine": machine,
        "kubelet": draw(kubelets(machine)),
        "devicePlugins": draw(device_plugins(machine)),
        "pods": [draw(pods(f"earlier{i}", machine)) for i in range(earlier)],
        "pod": draw(pods("pod", machine)),
    }


def _known_difference(kubelet: Verdict, model: Verdict) -> bool:
    """Where the kubelet panics on some pods the model admits none (docs/placement.md, "Known differences from
    the kubelet"): prefer-closest-numa-nodes on sparse NUMA ids (the kubelet admits pods whose merge weighs no
    two masks of one width), a NUMA id above 63 (pods that need no NUMA mask)."""
    if model.message == SPARSE_NUMA_DISTANCES_MESSAGE:
        event("known difference: prefer-closest-numa-nodes with sparse NUMA ids (the kubelet panics)")
        return True
    if model.reason == TOPOLOGY_MANAGER_UNAVAILABLE and model.message.endswith(NUMA_ID_ABOVE_63):
        event("known difference: a NUMA id above 63 (the kubelet panics)")
        return True
    assert kubelet.reason != KUBELET_PANIC, f"the kubelet panicked: {kubelet.message}"
    if (
        kubelet.reason == model.reason == UNEXPECTED_ADMISSION_ERROR
        and DEVICE_MANAGER_REFUSAL.search(kubelet.message)
        and DEVICE_MANAGER_REFUSAL.search(model.message)
    ):
        # allocateContainerResources goes over a container's limits in Go map order: where two device
        # resources fall short, either may be named.
        event("either device resource named: the kubelet's map order")
        return True
    return False


def _reuse_is_a_draw(case: Json, pod: Json) -> bool:
    """A container reusing part of a run-to-completion init container's devices, out of several NUMA groups:
    ``allocateRemainingFrom(reusableDevices)`` goes over a set, in Go map order, a new draw on every run
    (the plugin's preference is not asked there). What the next containers find, and so their hints, is one
    draw of the kubelet's; the model takes its own (docs/placement.md, "Known differences from the kubelet")."""
    groups = {
        plugin["resource"]: {
            tuple(n["ID"] for n in (d.get("topology") or {}).get("nodes", [])) for d in plugin["devices"]
        }
        for plugin in case["devicePlugins"]
    }
    held: dict[str, int] = {}
    for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
        limits = container["resources"].get("limits", {})
        for resource, count in limits.items():
            if len(groups.get(resource, ())) > 1 and 0 < int(count) < held.get(resource, 0):
                return True
        if container in pod["spec"].get("initContainers", []) and container.get("restartPolicy") != "Always":
            for resource, count in limits.items():
                held[resource] = max(held.get(resource, 0), int(count)) if resource in groups else 0
    return False


def _cpu_reuse_is_by_cores(case: Json, pod: Json) -> bool:
    """A container taking exclusive CPUs while a run-to-completion init container before it left some
    reusable: the kubelet takes them out of free and reusable CPUs alike, whole cores first
    (``policy_static.go`` ``allocateCPUs`` through ``takeByTopologyNUMAPacked``), so which reusable CPUs
    remain, and on which NUMA nodes (every later container's hints must cover them), depends on which cores
    are whole. The model counts CPUs per cell, not cores, and takes the reusable ones first
    (docs/placement.md, "Known differences from the kubelet")."""
    if case["kubelet"].get("cpuManagerPolicy") != "static":
        return False
    held = 0
    for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
        cpu = str(container["resources"].get("limits", {}).get("cpu", ""))
        cpus = int(cpu) if cpu.isdigit() else 0
        if cpus and held:
            return True
        if container in pod["spec"].get("initContainers", []) and container.get("restartPolicy") != "Always":
            held = max(held, cpus)
    return False


def _cells_packed_by_socket(case: Json, kubelet: Verdict, model: Verdict) -> bool:
    """The same admission, other containers' affinities, on a machine whose sockets hold several NUMA nodes
    under the static CPU manager: there ``takeByTopologyNUMAPacked`` takes CPUs from the socket with the
    fewest free CPUs first, then the NUMA node (``cpu_assignment.go`` ``sortAvailableCores``), so which cell a
    container's CPUs come from, and what the next container's hint finds free, depends on sockets the model
    does not know: it takes from the fullest cell (docs/placement.md, "Known differences from the kubelet")."""
    if case["kubelet"].get("cpuManagerPolicy") != "static":
        return False
    if (kubelet.admit, kubelet.reason, kubelet.message) != (model.admit, model.reason, model.message):
        return False
    cells_of_socket: dict[int, set[int]] = {}
    for cell in case["machine"]["topology"]:
        for core in cell["cores"]:
            cells_of_socket.setdefault(core["socket_id"], set()).add(cell["node_id"])
    return any(len(cells) > 1 for cells in cells_of_socket.values())


@oracle_settings()
@given(case=kubelet_cases())
def test_admission_is_the_kubelets(kubelet_oracle: Oracle, case: Json) -> None:
    """Every pod of the case: admitted or rejected as the kubelet does, with its reason and message, and each
    container's NUMA affinity (mask and preferred) when admitted."""
    note(json.dumps(case, separators=(",", ":")))
    try:
        answer = kubelet_oracle.ask(case)
    except OracleTimedOut:
        # The kubelet's own code spins on some cases (docs/placement.md, "Known differences from the kubelet").
        event("left out: the kubelet's code gave no answer within the oracle's time limit")
        return
    expected = oracle_verdicts(answer)
    got = model_verdicts(case, answer)
    for position, (kubelet, model) in enumerate(zip(expected, got, strict=True)):
        if answer["steps"]:
            note(f"the kubelet's state before pod {position}: {json.dumps(answer['steps'][position]['node'])}")
        if _known_difference(kubelet, model):
            return
        if answer["steps"] and answer["steps"][position].get("reservedTaken"):
            # takeByTopologyNUMAPacked on sockets of several NUMA nodes can hand out a reserved CPU
            # (docs/placement.md, "Known differences from the kubelet").
            event("the kubelet gave a reserved CPU as an exclusive one")
            return
        if model != kubelet and _reuse_is_a_draw(case, [*case["pods"], case["pod"]][position]):
            event("the kubelet's draw among an init container's devices")
            return
        if model != kubelet and _cpu_reuse_is_by_cores(case, [*case["pods"], case["pod"]][position]):
            event("the kubelet's cores among an init container's CPUs")
            return
        if model != kubelet and _cells_packed_by_socket(case, kubelet, model):
            event("the kubelet packs CPUs by socket first")
            return
        assert model == kubelet, f"pod {position}:\n  kubelet: {kubelet}\n  model:   {model}"
