"""Cases for the kube-scheduler oracle (tests/oracles/scheduler) and the project's answer to the same case.

A case is what the API server serves (JSON): Nodes, the Pods bound to them, Namespaces, PersistentVolumeClaims
with their PersistentVolumes and StorageClasses, and the incoming Pod. ``cases()`` draws them shaped like
GPU clusters: nodes named and labelled as the machines in ../shared/data/gpu (instance type, GPU Feature
Discovery's ``nvidia.com/gpu.product`` / ``gpu.memory`` / ``gpu.count``, zone and region, a couple of custom
labels), the taints a GPU cluster's nodes carry (not-ready, unreachable, unschedulable, the GPU operator's
``nvidia.com/gpu=present:NoSchedule``, ``PreferNoSchedule`` ones), cordons and every Ready condition; placed
pods with labels, host ports and affinity terms; an incoming pod using every field the plugins read. Only
objects the API server accepts are drawn, and the pods as it stores them: ``matchLabelKeys`` and
``mismatchLabelKeys`` of pod (anti-)affinity terms already merged into the label selector
(``applyMatchLabelKeysAndMismatchLabelKeys``, pkg/registry/core/pod/strategy.go).

``project_answer`` feeds the same objects through the service's own readers (``placement.cluster.objects``
for Nodes, Namespaces, claims, volumes and classes; ``placement.core.pods`` for the pods) into
``SchedulingFacts``, the live index's ``ClusterView``, and runs the vectorised filter and scores the service
runs, and the node-by-node reference; ``oracle_answer`` reads upstream's answer into the same shape.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from placement.cluster.objects import (
    claim_source,
    labels_of,
    node_facts,
    volume_node_affinity,
    waits_for_first_consumer,
)
from placement.core.constraints import reference
from placement.core.constraints.cache import ConstraintCache
from placement.core.constraints.filtering import constraint_filter
from placement.core.constraints.scores import constraint_scores
from placement.core.constraints.terms import IncomingPod
from placement.core.constraints.verdicts import SCORE_WEIGHTS, FilterStage
from placement.core.pods import placed_pod, pod_spec_from_object, validate_pod
from placement.core.vocabulary import Rejected, RejectionKind
from placement.state.scheduling_facts import SchedulingFacts

Json = dict[str, Any]

GPU_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "gpu"
# GPU Feature Discovery's product label and memory (MiB) per model token of the captures' file names.
_GFD = {
    "A100": ("NVIDIA-A100-SXM4-40GB", "40960"),
    "H100": ("NVIDIA-H100-80GB-HBM3", "81559"),
    "L40S": ("NVIDIA-L40S", "46068"),
    "1080Ti": ("NVIDIA-GeForce-GTX-1080-Ti", "11264"),
}
_FALLBACK_MACHINES = (("p4d.24xlarge", 8, "A100"), ("p5.48xlarge", 8, "H100"), ("g6e.12xlarge", 4, "L40S"))
_CAPTURE = re.compile(r"^(?:aws_)?(?P<machine>[a-z0-9.]+?)_(?P<count>\d+)x(?P<model>[A-Za-z0-9]+)_")


@dataclass(frozen=True)
class Machine:
    instance_type: str
    gpus: int
    product: str
    memory_mib: str


def machines() -> tuple[Machine, ...]:
    """The GPU machines of ../shared/data/gpu (instance type, GPU count and model from each capture's name),
    or three AWS GPU instance types when the captures are absent."""
    found = []
    if GPU_DATA.is_dir():
        for path in sorted(GPU_DATA.glob("*.txt")):
            match = _CAPTURE.match(path.name)
            if match and match["model"] in _GFD:
                found.append((match["machine"], int(match["count"]), match["model"]))
    shapes = found or list(_FALLBACK_MACHINES)
    return tuple(Machine(kind, count, *_GFD[model]) for kind, count, model in dict.fromkeys(shapes))


MACHINES = machines()
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
REGIONS = ("us-east-1", "us-west-2")
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
PRODUCT = "nvidia.com/gpu.product"
MEMORY = "nvidia.com/gpu.memory"
POOL = "kubenexus.io/pool"
RANK = "example.com/rack-rank"  # numeric, for Gt / Lt
NODE_KEYS = (HOSTNAME, ZONE, REGION, PRODUCT, MEMORY, POOL, RANK, "node.kubernetes.io/instance-type")
TOPOLOGY_KEYS = (HOSTNAME, ZONE, REGION, POOL, PRODUCT)
TAINTS: tuple[Json, ...] = (
    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
)
NAMESPACES: dict[str, dict[str, str]] = {"default": {}, "team-a": {"team": "a"}, "team-b": {"team": "b", "gpu": "yes"}}
POD_KEYS = ("app", "tier", "job")
STORAGE_CLASS = "fast-immediate"


# --- strategies ------------------------------------------------------------------------------------------


def _ready_condition(draw: st.DrawFn) -> list[Json]:
    status = draw(st.sampled_from(("True", "True", "False", "Unknown", None)))
    return [] if status is None else [{"type": "Ready", "status": status}]


@st.composite
def nodes(draw: st.DrawFn) -> list[Json]:
    count = draw(st.integers(1, 6))
    result = []
    for position in range(count):
        machine = draw(st.sampled_from(MACHINES))
        name = f"gpu-node-{position}"
        labels = {HOSTNAME: name, "node.kubernetes.io/instance-type": machine.instance_type}
        if draw(st.integers(0, 5)):
            labels[ZONE] = draw(st.sampled_from(ZONES))
        if draw(st.integers(0, 5)):
            labels[REGION] = draw(st.sampled_from(REGIONS))
        if draw(st.booleans()):
            labels[PRODUCT], labels[MEMORY] = machine.product, machine.memory_mib
            labels["nvidia.com/gpu.count"] = str(machine.gpus)
        if draw(st.booleans()):
            labels[POOL] = draw(st.sampled_from(("a", "b")))
        if draw(st.booleans()):
            labels[RANK] = draw(st.sampled_from(("1", "5", "10", "07")))
        taints = draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=lambda t: (t["key"], t["effect"])))
        if draw(st.booleans()):
            taints = []
        spec: Json = {"taints": [dict(t) for t in taints]} if taints else {}
        if draw(st.integers(0, 7)) == 0:
            spec["unschedulable"] = True
        status = {
            "allocatable": {"cpu": "96", "memory": "1100Gi", "pods": "110", "nvidia.com/gpu": str(machine.gpus)},
            "conditions": _ready_condition(draw),
        }
        result.append({"metadata": {"name": name, "labels": labels}, "spec": spec, "status": status})
    return result


def _values(draw: st.DrawFn, pool: Sequence[str]) -> list[str]:
    return draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True))


@st.composite
def node_requirement(draw: st.DrawFn) -> Json:
    key = draw(st.sampled_from(NODE_KEYS))
    operator = draw(st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")))
    if operator in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": operator}
    if operator in ("Gt", "Lt"):
        return {
            "key": draw(st.sampled_from((RANK, MEMORY))),
            "operator": operator,
            "values": [draw(st.sampled_from(("0", "3", "40000", "46068")))],
        }
    pool = {
        ZONE: ZONES,
        REGION: REGIONS,
        PRODUCT: tuple(m.product for m in MACHINES),
        MEMORY: tuple(m.memory_mib for m in MACHINES),
        POOL: ("a", "b"),
        RANK: ("1", "5"),
        HOSTNAME: tuple(f"gpu-node-{i}" for i in range(6)),
    }.get(key, tuple(m.instance_type for m in MACHINES))
    return {"key": key, "operator": operator, "values": _values(draw, pool)}


@st.composite
def node_selector_term(draw: st.DrawFn) -> Json:
    term: Json = {}
    expressions = draw(st.lists(node_requirement(), max_size=2))
    if expressions:
        term["matchExpressions"] = expressions
    if draw(st.integers(0, 3)) == 0:
        operator = draw(st.sampled_from(("In", "NotIn")))
        term["matchFields"] = [
            {"key": "metadata.name", "operator": operator, "values": [f"gpu-node-{draw(st.integers(0, 6))}"]}
        ]
    return term


# Label selectors as the terms and spread constraints of workloads write them, simplest first (what a
# failing case shrinks to). One draw each: a case is drawn from a few hundred choices, not thousands.
SELECTORS: tuple[Json, ...] = (
    {},
    {"matchLabels": {"app": "trainer"}},
    {"matchLabels": {"app": "server"}},
    {"matchLabels": {"app": "trainer", "tier": "a"}},
    {"matchLabels": {"job": "b"}},
    {"matchExpressions": [{"key": "app", "operator": "In", "values": ["trainer", "server"]}]},
    {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["server"]}]},
    {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "job", "operator": "DoesNotExist"}]},
    {"matchLabels": {"app": "trainer"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]},
)
NAMESPACE_LISTS: tuple[tuple[str, ...], ...] = ((), ("default",), ("team-a",), ("team-a", "team-b"), ("elsewhere",))
NAMESPACE_SELECTORS: tuple[Json | None, ...] = (
    None,
    {},
    {"matchLabels": {"team": "a"}},
    {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
)
LABEL_KEYS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    ((), ()),
    (("tier",), ()),
    ((), ("job",)),
    (("job",), ("tier",)),
    (("app",), ()),
)
LABEL_SETS: tuple[dict[str, str], ...] = (
    {},
    {"app": "trainer"},
    {"app": "server"},
    {"app": "trainer", "tier": "a"},
    {"app": "server", "tier": "b", "job": "a"},
    {"app": "trainer", "job": "b"},
    {"tier": "a"},
    {"job": "b"},
)
PORT_SETS: tuple[tuple[Json, ...], ...] = (
    (),
    ({"containerPort": 8000, "hostPort": 8080},),
    ({"containerPort": 8000, "hostPort": 8080, "protocol": "UDP"},),
    ({"containerPort": 8000, "hostPort": 8080, "hostIP": "10.0.0.1"},),
    ({"containerPort": 8000, "hostPort": 8080, "hostIP": "10.0.0.2", "protocol": "TCP"},),
    ({"containerPort": 8000, "hostPort": 8080, "hostIP": "0.0.0.0"},),
    ({"containerPort": 8000, "hostPort": 9090}, {"containerPort": 8001, "hostPort": 8080, "hostIP": "10.0.0.1"}),
)


def _copy(value: Json) -> Json:
    return copy.deepcopy(value)


def _selector_keys(selector: Json | None) -> set[str]:
    if selector is None:
        return set()
    return set(selector.get("matchLabels") or {}) | {e["key"] for e in selector.get("matchExpressions") or ()}


@st.composite
def label_selector(draw: st.DrawFn) -> Json:
    return _copy(draw(st.sampled_from(SELECTORS)))


@st.composite
def pod_affinity_term(draw: st.DrawFn) -> Json:
    term: Json = {"topologyKey": draw(st.sampled_from(TOPOLOGY_KEYS))}
    selector = draw(st.sampled_from((*SELECTORS, None)))
    if selector is not None:
        term["labelSelector"] = _copy(selector)
    namespaces = draw(st.sampled_from(NAMESPACE_LISTS))
    if namespaces:
        term["namespaces"] = list(namespaces)
    namespace_selector = draw(st.sampled_from(NAMESPACE_SELECTORS))
    if namespace_selector is not None:
        term["namespaceSelector"] = _copy(namespace_selector)
    match, mismatch = draw(st.sampled_from(LABEL_KEYS))
    taken = _selector_keys(selector)
    # The API server wants a selector, and keys neither in it nor in both lists.
    if selector is not None and not taken & {*match, *mismatch}:
        if match:
            term["matchLabelKeys"] = list(match)
        if mismatch:
            term["mismatchLabelKeys"] = list(mismatch)
    return term


@st.composite
def pod_affinity(draw: st.DrawFn, *, preferred: bool = True) -> Json:
    affinity: Json = {}
    required = draw(st.lists(pod_affinity_term(), max_size=2))
    if required:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if preferred:
        weighted = draw(
            st.lists(
                st.builds(lambda w, t: {"weight": w, "podAffinityTerm": t}, st.integers(1, 100), pod_affinity_term()),
                max_size=2,
            )
        )
        if weighted:
            affinity["preferredDuringSchedulingIgnoredDuringExecution"] = weighted
    return affinity


def _container(ports: Sequence[Json]) -> Json:
    container: Json = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}
    if ports:
        container["ports"] = list(ports)
    return container


@st.composite
def host_ports(draw: st.DrawFn) -> list[Json]:
    return [dict(p) for p in draw(st.sampled_from(PORT_SETS))]


def _labels(draw: st.DrawFn) -> dict[str, str]:
    return dict(draw(st.sampled_from(LABEL_SETS)))


@st.composite
def placed_pods(draw: st.DrawFn, node_names: Sequence[str]) -> list[Json]:
    pods = []
    for position in range(draw(st.integers(0, 10))):
        spec: Json = {"nodeName": draw(st.sampled_from(node_names)), "containers": [_container(draw(host_ports()))]}
        if draw(st.integers(0, 2)) == 0:
            affinity: Json = {}
            if draw(st.booleans()):
                affinity["podAffinity"] = draw(pod_affinity())
            if draw(st.booleans()):
                affinity["podAntiAffinity"] = draw(pod_affinity())
            if affinity:
                spec["affinity"] = affinity
        metadata = {
            "name": f"placed-{position}",
            "namespace": draw(st.sampled_from(tuple(NAMESPACES))),
            "labels": _labels(draw),
        }
        pods.append(api_server_stored({"metadata": metadata, "spec": spec, "status": {"phase": "Running"}}))
    return pods


@st.composite
def tolerations(draw: st.DrawFn) -> list[Json]:
    result: list[Json] = []
    if draw(st.booleans()):  # what a GPU pod carries (the GPU operator's taint)
        result.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    for _ in range(draw(st.integers(0, 3))):
        taint = draw(st.sampled_from(TAINTS))
        form = draw(st.sampled_from(("equal", "exists", "any-key", "no-effect")))
        toleration: Json
        if form == "any-key":
            toleration = {"operator": "Exists"}
        elif form == "exists":
            toleration = {"key": taint["key"], "operator": "Exists"}
        else:
            toleration = {
                "key": taint["key"],
                "operator": "Equal",
                "value": draw(st.sampled_from((taint.get("value", ""), "other"))),
            }
        if form != "no-effect" and draw(st.booleans()):
            toleration["effect"] = draw(st.sampled_from(("NoSchedule", "PreferNoSchedule", "NoExecute")))
        if toleration.get("effect") == "NoExecute" and draw(st.booleans()):
            toleration["tolerationSeconds"] = 300
        result.append(toleration)
    return result


@st.composite
def spread_constraint(draw: st.DrawFn) -> Json:
    when = draw(st.sampled_from(("DoNotSchedule", "ScheduleAnyway")))
    constraint: Json = {
        "maxSkew": draw(st.integers(1, 3)),
        "topologyKey": draw(st.sampled_from(TOPOLOGY_KEYS)),
        "whenUnsatisfiable": when,
    }
    if draw(st.integers(0, 5)):
        constraint["labelSelector"] = draw(label_selector())
    if when == "DoNotSchedule" and draw(st.integers(0, 3)) == 0:
        constraint["minDomains"] = draw(st.integers(1, 4))
    if draw(st.integers(0, 3)) == 0:
        constraint["nodeAffinityPolicy"] = draw(st.sampled_from(("Honor", "Ignore")))
    if draw(st.integers(0, 3)) == 0:
        constraint["nodeTaintsPolicy"] = draw(st.sampled_from(("Honor", "Ignore")))
    free = [k for k in POD_KEYS if k not in _selector_keys(constraint.get("labelSelector"))]
    if "labelSelector" in constraint and free and draw(st.integers(0, 4)) == 0:
        constraint["matchLabelKeys"] = draw(st.lists(st.sampled_from(free), min_size=1, max_size=2, unique=True))
    return constraint


@st.composite
def incoming_pod(draw: st.DrawFn, node_names: Sequence[str]) -> Json:
    spec: Json = {"containers": [_container(draw(host_ports()))]}
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = draw(
            st.dictionaries(
                st.sampled_from((ZONE, POOL, PRODUCT)),
                st.sampled_from((*ZONES[:2], "a", MACHINES[0].product)),
                min_size=1,
                max_size=2,
            )
        )
    affinity: Json = {}
    if draw(st.booleans()):
        node_affinity: Json = {}
        if draw(st.integers(0, 2)) == 0:
            node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
                "nodeSelectorTerms": draw(st.lists(node_selector_term(), min_size=1, max_size=2))
            }
        preferred = draw(
            st.lists(
                st.builds(lambda w, t: {"weight": w, "preference": t}, st.integers(1, 100), node_selector_term()),
                max_size=2,
            )
        )
        if preferred:
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        if node_affinity:
            affinity["nodeAffinity"] = node_affinity
    if draw(st.booleans()):
        affinity["podAffinity"] = draw(pod_affinity())
    if draw(st.booleans()):
        affinity["podAntiAffinity"] = draw(pod_affinity())
    if affinity:
        spec["affinity"] = affinity
    found = draw(tolerations())
    if found:
        spec["tolerations"] = found
    if draw(st.booleans()):
        spread = draw(
            st.lists(
                spread_constraint(),
                min_size=1,
                max_size=2,
                unique_by=lambda c: (c["topologyKey"], c["whenUnsatisfiable"]),
            )
        )
        spec["topologySpreadConstraints"] = spread
    if draw(st.integers(0, 24)) == 0:
        spec["nodeName"] = draw(st.sampled_from((*node_names, "gpu-node-9")))
    elif draw(st.integers(0, 24)) == 0:  # the API server refuses scheduling gates on a pod with a node name
        spec["schedulingGates"] = [{"name": "kubenexus.io/quota"}]
    if draw(st.integers(0, 7)) == 0:
        claims = draw(st.lists(st.sampled_from(CLAIM_NAMES), min_size=1, max_size=2, unique=True))
        spec["volumes"] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    metadata = {"name": "incoming", "namespace": draw(st.sampled_from(tuple(NAMESPACES))), "labels": _labels(draw)}
    return api_server_stored({"metadata": metadata, "spec": spec})


CLAIM_NAMES = ("data-bound", "data-zonal", "data-host", "data-unbound", "data-missing")


def volume_objects(
    namespace: str, node_names: Sequence[str], draw: st.DrawFn
) -> tuple[list[Json], list[Json], list[Json]]:
    """Claims in the incoming pod's namespace: bound to a volume without node affinity, to a zonal one,
    to one pinned to a host, and unbound with an Immediate class; ``data-missing`` is never created."""
    claims, volumes = [], []
    affinities: dict[str, Json | None] = {
        "data-bound": None,
        "data-zonal": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [draw(st.sampled_from(ZONES))]}]},
        "data-host": {
            "matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [draw(st.sampled_from(node_names))]}]
        },
    }
    for position, (claim, term) in enumerate(affinities.items()):
        volume = f"pv-{position}"
        uid = f"uid-{position}"
        claims.append(
            {
                "metadata": {
                    "name": claim,
                    "namespace": namespace,
                    "uid": uid,
                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
                },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                    "volumeName": volume,
                    "storageClassName": STORAGE_CLASS,
                },
                "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}},
            }
        )
        pv: Json = {
            "metadata": {"name": volume},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
                "storageClassName": STORAGE_CLASS,
                "claimRef": {"kind": "PersistentVolumeClaim", "namespace": namespace, "name": claim, "uid": uid},
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": volume},
            },
            "status": {"phase": "Bound"},
        }
        if term is not None:
            pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
        volumes.append(pv)
    claims.append(
        {
            "metadata": {"name": "data-unbound", "namespace": namespace, "uid": "uid-unbound"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": STORAGE_CLASS,
            },
            "status": {"phase": "Pending"},
        }
    )
    classes = [
        {"metadata": {"name": STORAGE_CLASS}, "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "Immediate"}
    ]
    return claims, volumes, classes


@st.composite
def cases(draw: st.DrawFn) -> Json:
    """One cluster and one pod to schedule in it."""
    cluster_nodes = draw(nodes())
    names = [n["metadata"]["name"] for n in cluster_nodes]
    pod = draw(incoming_pod(names))
    claims, volumes, classes = volume_objects(pod["metadata"]["namespace"], names, draw)
    known = [ns for ns in NAMESPACES if draw(st.integers(0, 5))]
    return {
        "nodes": cluster_nodes,
        "pods": draw(placed_pods(names)),
        "namespaces": [{"metadata": {"name": ns, "labels": NAMESPACES[ns]}} for ns in known],
        "claims": claims,
        "volumes": volumes,
        "storageClasses": classes,
        "pod": pod,
    }


def api_server_stored(pod: Json) -> Json:
    """The pod as the API server stores it: each pod (anti-)affinity term's ``matchLabelKeys`` /
    ``mismatchLabelKeys`` merged into its label selector as ``key In (value)`` / ``key NotIn (value)`` for
    the keys the pod carries (``applyMatchLabelKeysAndMismatchLabelKeys``, pkg/registry/core/pod/strategy.go;
    MatchLabelKeysInPodAffinity is GA). kube-scheduler reads the merged selector only."""
    labels = pod["metadata"].get("labels") or {}
    affinity = pod["spec"].get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind) or {}
        terms = list(rules.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [w["podAffinityTerm"] for w in rules.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
        for term in terms:
            selector = term.get("labelSelector")
            if selector is None:
                continue
            merged = [
                {"key": k, "operator": operator, "values": [labels[k]]}
                for field, operator in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn"))
                for k in term.get(field) or ()
                if k in labels
            ]
            if merged:
                selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *merged]
    return pod


# --- the two answers, normalised ------------------------------------------------------------------------

_CODES = {RejectionKind.NODE_CONSTRAINT: "UnschedulableAndUnresolvable", RejectionKind.POD_CONSTRAINT: "Unschedulable"}
COMPARED_PLUGINS = tuple(name for name, _ in SCORE_WEIGHTS)


@dataclass(frozen=True)
class Answer:
    """Per node (code, reasons): ("Success", ()) or a refusal; per feasible node each compared plugin's
    normalised score (None: the plugin was skipped, it adds the same to every node)."""

    nodes: dict[str, tuple[str, tuple[str, ...]]]
    scores: Mapping[str, Mapping[str, int | None]]


def _refusal(rejected: Rejected | None) -> tuple[str, tuple[str, ...]]:
    if rejected is None:
        return ("Success", ())
    return (_CODES[rejected.kind], (rejected.message,))


def oracle_answer(result: Mapping[str, Any]) -> Answer:
    names = sorted(result.get("nodes") or {})
    refused = result.get("preEnqueue") or result.get("preFilter")
    if refused is not None:
        return Answer({"*": (refused["code"], tuple(refused.get("reasons") or ()))}, {})
    nodes = {n: (v["code"], tuple(v.get("reasons") or ())) for n, v in result["nodes"].items()}
    scores: dict[str, dict[str, int | None]] = {}
    for name in names:
        if nodes[name][0] != "Success":
            continue
        plugins = (result.get("scores") or {}).get(name, {}).get("plugins", {})
        scores[name] = {p: plugins.get(p) for p in COMPARED_PLUGINS}
    return Answer(nodes, scores)


@dataclass(frozen=True)
class Cluster:
    """A case read the service's way: ``SchedulingFacts`` (one slot per node) and the incoming pod."""

    facts: SchedulingFacts
    names: tuple[str, ...]
    pod: IncomingPod

    def reference_facts(self) -> reference.ClusterFacts:
        view = self.facts
        pods, _ = view.placed_pods()
        namespaces = tuple((ns, labels) for ns in NAMESPACES if (labels := view.namespace_labels(ns)) is not None)
        claims = tuple(
            ((self.pod.namespace, name), claim)
            for name in self.pod.constraints.claims
            if (claim := view.claim(self.pod.namespace, name)) is not None
        )
        node_facts_ = tuple(f for n in self.names if (f := view.node(n)) is not None)
        return reference.ClusterFacts(nodes=node_facts_, pods=tuple(pods), namespaces=namespaces, claims=claims)


def read_case(case: Mapping[str, Any]) -> Cluster:
    facts = SchedulingFacts()
    names = tuple(n["metadata"]["name"] for n in case["nodes"])
    facts.grow(len(names))
    for slot, obj in enumerate(case["nodes"]):
        facts.set_node(node_facts(obj))
        facts.attach(obj["metadata"]["name"], slot)
    for obj in case.get("namespaces") or ():
        facts.set_namespace(obj["metadata"]["name"], labels_of(obj))
    for obj in case.get("claims") or ():
        facts.set_claim(obj["metadata"]["namespace"], obj["metadata"]["name"], claim_source(obj))
    for obj in case.get("volumes") or ():
        facts.set_volume(obj["metadata"]["name"], volume_node_affinity(obj))
    for obj in case.get("storageClasses") or ():
        facts.set_storage_class(obj["metadata"]["name"], wait_for_first_consumer=waits_for_first_consumer(obj))
    for obj in case.get("pods") or ():
        placed = placed_pod(obj)
        if placed is not None:
            facts.put_pod(placed)
    pending = validate_pod(pod_spec_from_object(case["pod"]))
    pod = IncomingPod(pending.namespace, pending.sorted_labels(), pending.constraints)
    return Cluster(facts, names, pod)


def _pod_level(answer: Answer) -> Answer:
    """One pod-level refusal (every node refused alike before any Filter) collapsed as the oracle reports it."""
    kinds = set(answer.nodes.values())
    return Answer({"*": kinds.pop()}, {}) if len(kinds) == 1 else answer


def project_answers(case: Mapping[str, Any]) -> tuple[Answer, Answer]:
    """The vectorised plugins' answer (what the service runs) and the reference port's."""
    cluster = read_case(case)
    pod, view = cluster.pod, cluster.facts
    rows = np.arange(len(cluster.names), dtype=np.int64)
    verdict = constraint_filter(view, rows, pod.namespace, pod.labels, pod.constraints, cache=ConstraintCache())
    first_stage = verdict.stage(0)
    pod_level = first_stage is not None and first_stage <= FilterStage.PRE_FILTER
    vectorised = {n: _refusal(verdict.rejected(p)) for p, n in enumerate(cluster.names)}
    feasible = [p for p, n in enumerate(cluster.names) if vectorised[n][0] == "Success"]
    scored = (
        constraint_scores(
            view,
            np.array(feasible, dtype=np.int64),
            pod.namespace,
            pod.labels,
            pod.constraints,
            cache=ConstraintCache(),
        )
        if feasible
        else {}
    )
    vector_scores = {
        cluster.names[p]: {plugin: int(scored[plugin][i]) for plugin in COMPARED_PLUGINS}
        for i, p in enumerate(feasible)
    }
    facts = cluster.reference_facts()
    judged = {n: reference.filter_node(facts, pod, n) for n in cluster.names}
    ref_nodes = {n: _refusal(None if j is None else j[1]) for n, j in judged.items()}
    ref_feasible = [n for n in cluster.names if ref_nodes[n][0] == "Success"]
    ref_scored = reference.score_nodes(facts, pod, ref_feasible) if ref_feasible else {}
    ref_scores = {n: {plugin: ref_scored[plugin][i] for plugin in COMPARED_PLUGINS} for i, n in enumerate(ref_feasible)}
    first = Answer(vectorised, vector_scores)
    second = Answer(ref_nodes, ref_scores)
    if pod_level:
        return _pod_level(first), _pod_level(second)
    return first, second


def score_differences(expected: Answer, got: Answer) -> list[str]:
    """Where the scores of the feasible nodes differ, plugin by plugin (equal normalised scores make equal
    weighted sums at the default profile's weights). A plugin upstream skipped adds the same to every
    node: the project's must then be flat."""
    problems = []
    names = sorted(expected.scores)
    for plugin in COMPARED_PLUGINS:
        want = [expected.scores[n][plugin] for n in names]
        have = [got.scores[n][plugin] for n in names]
        if any(w is None for w in want):
            if len(set(have)) > 1:
                problems.append(
                    f"{plugin}: upstream skipped it, the project scores {dict(zip(names, have, strict=True))}"
                )
        elif want != have:
            upstream, project = dict(zip(names, want, strict=True)), dict(zip(names, have, strict=True))
            problems.append(f"{plugin}: upstream {upstream}, project {project}")
    return problems
