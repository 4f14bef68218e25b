"""Workload policies, pure: how a pod's kind of workload and its tenant's tier move its node scores.

Two score components, each in [0, 1] per feasible node, joined to the topology score at their weights
(``PolicyWeights``; ``scoring.with_constraint_scores``, as kube-scheduler's plugin scores join it):

* ``workload`` (WorkloadAware). A *service* pod (its controller is a ReplicaSet or a StatefulSet, or the
  pod says so) is SPREAD: it prefers nodes holding fewer pods of its own workload (the Deployment behind
  its ReplicaSet, or its StatefulSet) and, among those, less loaded nodes:
  ``0.75 x (1 - own / most own on a candidate) + 0.25 x (1 - load)``. A *batch* pod (a Job's, an
  operator's, a gang member, a pod without controller) is BIN-PACKED: it prefers fuller nodes, ``load``.
  ``load`` is the node's utilisation after placement, the mean over the resources the pod asks for (cpu
  and memory when it asks none) of (allocatable - free + request) / allocatable: kube-scheduler's
  MostAllocated measure, and 1 - LeastAllocated's.
* ``tenant`` (TenantHardware). A per-cluster map from tenants (namespaces, or a pod label selector) to
  tiers, and from tiers to node pools (node label selectors, most preferred first): a node in the
  tier's first pool scores 1, in its i-th of n pools 1 - i/n, elsewhere 0. A preference, never a
  filter: a pod whose pools are full lands elsewhere. ``tenant_tier`` is the tier as a number for the
  preemption planner's tie-break (higher tiers are evicted last).

The override ``scheduling.kubenexus.io/workload-class`` (annotation, else label: ``service``, ``batch``
or ``none``) wins over the controller; ``none`` leaves the pod's scores as they were.
``parse_workload_policies`` reads the per-cluster configuration (``kubenexus-placement serve
--workload-policies FILE``) and refuses what it cannot use with one sentence naming the key.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placement.core.annotations import GROUP_NAME_KEY, SCHEDULER_PLUGINS_KEY, InvalidValue
from placement.core.constraints.constraint_types import LabelSelector, Operator, Requirement
from placement.core.constraints.selectors import Selector, SelectorError, parse_label_selector
from placement.core.vocabulary import CPU, BoolArray, FloatArray, IntArray, NodeArrays, PodDemand

WORKLOAD_CLASS_KEY = "scheduling.kubenexus.io/workload-class"
# The group name Volcano's admission writes on a PodGroup's pods (volcano.sh/apis scheduling/v1beta1
# KubeGroupNameAnnotationKey): a gang member whatever controller made it.
VOLCANO_GROUP_KEY = "scheduling.k8s.io/group-name"
_GANG_KEYS = (GROUP_NAME_KEY, SCHEDULER_PLUGINS_KEY)
# The Deployment controller names a ReplicaSet <deployment>-<pod-template-hash> and labels its pods with
# the hash (pkg/controller/deployment/sync.go, getNewReplicaSet): the pods of every ReplicaSet of one
# Deployment count as one workload, so a rollout's new pods spread away from the old ones too.
POD_TEMPLATE_HASH = "pod-template-hash"
DEFAULT_SERVICE_KINDS = ("ReplicaSet", "StatefulSet")
# Default weights beside the topology score's 12 (``scoring.TOPOLOGY_WEIGHT``): the workload component
# weighs as kube-scheduler's PodTopologySpread (2), which spreads a Service's pods by default; the tenant
# component as TaintToleration (3), the heaviest default preference of a node pool.
DEFAULT_WORKLOAD_WEIGHT = 2.0
DEFAULT_TENANT_WEIGHT = 3.0
# Batch pods are bin-packed by the topology score itself (its fragmentation component prefers the node
# where what is left stays usable, which packs); the workload component's own packing is off by default:
# on the trace (python -m placement.sim --subsample 4 --seeds 2 --policies ours) it left 5.65% of the
# GPUs unallocated at 100% arrival against 5.10% without it. Set weights.batch to pack harder.
DEFAULT_BATCH_WEIGHT = 0.0
MAX_WEIGHT = 100.0
SPREAD_OWN_SHARE = 0.75  # of the spread score: fewer pods of the own workload; the rest: less load
WORKLOAD_PLUGIN = "WorkloadAware"
TENANT_PLUGIN = "TenantHardware"
_SELECTOR_OPERATORS = {op.value: op for op in (Operator.IN, Operator.NOT_IN, Operator.EXISTS, Operator.DOES_NOT_EXIST)}
_KEYS = ("weights", "services", "tiers", "tenants", "defaultTier")


class WorkloadClass(enum.StrEnum):
    SERVICE = "service"  # spread
    BATCH = "batch"  # bin-packed
    NONE = "none"  # left as the topology score has it


class PolicyConfigError(ValueError):
    """A workload-policies document the service refuses; the message names the key and what is accepted."""


@dataclass(frozen=True)
class Tier:
    name: str
    pools: tuple[Selector, ...] = ()  # node label selectors, most preferred first


@dataclass(frozen=True)
class Tenant:
    """Pods of ``namespaces``, or pods ``selector`` matches (either is enough), belong to ``tier``."""

    tier: str
    namespaces: frozenset[str] = frozenset()
    selector: Selector | None = None

    def holds(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return namespace in self.namespaces or (self.selector is not None and self.selector.matches(labels))


@dataclass(frozen=True)
class WorkloadPolicies:
    """The per-cluster configuration; ``WorkloadPolicies()`` is the documented default (no tiers)."""

    workload_weight: float = DEFAULT_WORKLOAD_WEIGHT  # services spread
    tenant_weight: float = DEFAULT_TENANT_WEIGHT
    batch_weight: float = DEFAULT_BATCH_WEIGHT  # batch pods packed beyond what the topology score packs
    service_kinds: frozenset[str] = frozenset(DEFAULT_SERVICE_KINDS)
    tiers: tuple[Tier, ...] = ()  # most important first
    tenants: tuple[Tenant, ...] = ()  # the first that holds a pod decides its tier
    default_tier: str = ""  # the tier of a pod no tenant holds; "" below every tier
    _tier_index: Mapping[str, int] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tier_index", {tier.name: i for i, tier in enumerate(self.tiers)})

    def tier_of(self, namespace: str, labels: Mapping[str, str]) -> Tier | None:
        name = next((t.tier for t in self.tenants if t.holds(namespace, labels)), self.default_tier)
        position = self._tier_index.get(name)
        return None if position is None else self.tiers[position]

    def tenant_tier(self, namespace: str, labels: Mapping[str, str]) -> int:
        """The pod's tier as a number: ``len(tiers)`` for the first tier down to 1 for the last, 0 for a pod
        in no tier. The preemption planner evicts lower numbers first among otherwise equal candidates."""
        tier = self.tier_of(namespace, labels)
        return 0 if tier is None else len(self.tiers) - self._tier_index[tier.name]

    def workload_class(
        self, owner_kind: str, labels: Mapping[str, str], annotations: Mapping[str, str]
    ) -> WorkloadClass:
        """Override, then gang membership (batch), then the controller's kind (service), else batch."""
        stated = annotations.get(WORKLOAD_CLASS_KEY, labels.get(WORKLOAD_CLASS_KEY))
        if stated is not None:
            return parse_workload_class(stated)
        if any(key in labels for key in _GANG_KEYS) or VOLCANO_GROUP_KEY in annotations:
            return WorkloadClass.BATCH
        return WorkloadClass.SERVICE if owner_kind in self.service_kinds else WorkloadClass.BATCH


DEFAULT_POLICIES = WorkloadPolicies()


def parse_workload_class(value: str) -> WorkloadClass:
    """The override's value; raises ``InvalidValue`` naming the key and the accepted values."""
    try:
        return WorkloadClass(value)
    except ValueError:
        accepted = ", ".join(c.value for c in WorkloadClass)
        raise InvalidValue(WORKLOAD_CLASS_KEY, value, accepted) from None


def workload_key(owner_kind: str, owner_name: str, labels: Mapping[str, str]) -> str:
    """The workload a pod belongs to, ``Kind/name`` ("" without a controller): a ReplicaSet made by a
    Deployment counts as its Deployment."""
    if not owner_kind:
        return ""
    template_hash = labels.get(POD_TEMPLATE_HASH)
    if owner_kind == "ReplicaSet" and template_hash and owner_name.endswith(f"-{template_hash}"):
        return f"Deployment/{owner_name[: -len(template_hash) - 1]}"
    return f"{owner_kind}/{owner_name}"


# --- the components ---------------------------------------------------------------------------------


def node_load(arrays: NodeArrays, rows: IntArray, demand: PodDemand) -> FloatArray:
    """Per row, the node's utilisation in [0, 1] once the pod is placed (see the module docstring)."""
    requests = dict(demand.node_requests) or {CPU: 0.0, "memory": 0.0}
    total = np.zeros(len(rows))
    counted = 0
    for name, request in requests.items():
        column = arrays.column(name)
        if column is None:
            continue
        allocatable = arrays.node_allocatable[column][rows]
        taken = allocatable - arrays.node_free[column][rows] + request
        total += np.clip(np.divide(taken, allocatable, out=np.ones_like(taken), where=allocatable > 0), 0.0, 1.0)
        counted += 1
    result: FloatArray = total / max(counted, 1)
    return result


def workload_component(kind: WorkloadClass, load: FloatArray, own: IntArray) -> FloatArray | None:
    """The ``workload`` component of each row; None for a pod the policy leaves alone. ``own``: pods of the
    pod's own workload on each row's node."""
    if kind is WorkloadClass.NONE:
        return None
    if kind is WorkloadClass.BATCH:
        return load
    most = int(own.max(initial=0))
    fewer = 1.0 - own / most if most else np.ones(len(own))
    spread: FloatArray = SPREAD_OWN_SHARE * fewer + (1.0 - SPREAD_OWN_SHARE) * (1.0 - load)
    return spread


def pool_component(tier: Tier | None, matches: Callable[[Selector], BoolArray], count: int) -> FloatArray | None:
    """The ``tenant`` component of each row; None for a pod without a tier, or whose tier names no pool.
    ``matches``: which rows' nodes a node label selector selects."""
    if tier is None or not tier.pools:
        return None
    score = np.zeros(count)
    pools = len(tier.pools)
    for position, pool in enumerate(tier.pools):
        score = np.maximum(score, np.where(matches(pool), 1.0 - position / pools, 0.0))
    return score


def selector_rows(
    selector: Selector, label_column: Callable[[str], tuple[IntArray, tuple[str, ...]]], rows: IntArray
) -> BoolArray:
    """Which of ``rows`` a node label selector (In, NotIn, Exists, DoesNotExist) selects, from the nodes'
    label columns (``ClusterView.label_column``)."""
    selected: BoolArray = np.full(len(rows), selector.requirements is not None, dtype=np.bool_)
    for requirement in selector.requirements or ():
        codes, values = label_column(requirement.key)
        here = codes[rows]
        wanted = [code for code, value in enumerate(values) if value in requirement.values]
        operator = requirement.operator
        if operator is Operator.IN:
            selected &= np.isin(here, wanted)
        elif operator is Operator.NOT_IN:
            selected &= ~np.isin(here, wanted)
        elif operator is Operator.EXISTS:
            selected &= here >= 0
        else:
            selected &= here < 0
    return selected


# --- the configuration ------------------------------------------------------------------------------


def parse_workload_policies(document: Any) -> WorkloadPolicies:
    """The configuration document (decoded YAML or JSON; see docs/placement.md "Workload policies")."""
    if document is None:
        return DEFAULT_POLICIES
    root = _mapping(document, "the workload policies", _KEYS)
    weights = _mapping(root.get("weights"), "weights", ("workload", "tenant", "batch"))
    services = _mapping(root.get("services"), "services", ("ownerKinds",))
    tiers = tuple(_tier(item, f"tiers[{i}]") for i, item in enumerate(_sequence(root.get("tiers"), "tiers")))
    names = [tier.name for tier in tiers]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise PolicyConfigError(f"tiers: the tier {duplicate!r} is defined twice; each tier name must be unique")
    tenants = tuple(
        _tenant(item, f"tenants[{i}]", names) for i, item in enumerate(_sequence(root.get("tenants"), "tenants"))
    )
    default_tier = _string(root.get("defaultTier", ""), "defaultTier")
    if default_tier and default_tier not in names:
        raise PolicyConfigError(f"defaultTier: {default_tier!r} is not a tier; accepted: one of {names}")
    kinds = services.get("ownerKinds", list(DEFAULT_SERVICE_KINDS))
    return WorkloadPolicies(
        workload_weight=_weight(weights.get("workload", DEFAULT_WORKLOAD_WEIGHT), "weights.workload"),
        tenant_weight=_weight(weights.get("tenant", DEFAULT_TENANT_WEIGHT), "weights.tenant"),
        batch_weight=_weight(weights.get("batch", DEFAULT_BATCH_WEIGHT), "weights.batch"),
        service_kinds=frozenset(
            _string(kind, f"services.ownerKinds[{i}]") for i, kind in enumerate(_sequence(kinds, "services.ownerKinds"))
        ),
        tiers=tiers,
        tenants=tenants,
        default_tier=default_tier,
    )


def _tier(value: Any, where: str) -> Tier:
    item = _mapping(value, where, ("name", "pools"))
    name = _string(item.get("name"), f"{where}.name")
    if not name:
        raise PolicyConfigError(f"{where}.name: a tier needs a name, e.g. premium")
    pools = _sequence(item.get("pools"), f"{where}.pools")
    return Tier(name=name, pools=tuple(_selector(pool, f"{where}.pools[{i}]") for i, pool in enumerate(pools)))


def _tenant(value: Any, where: str, tiers: Sequence[str]) -> Tenant:
    item = _mapping(value, where, ("tier", "namespaces", "podSelector"))
    tier = _string(item.get("tier"), f"{where}.tier")
    if tier not in tiers:
        raise PolicyConfigError(f"{where}.tier: {tier!r} is not a tier; accepted: one of {list(tiers)}")
    namespaces = frozenset(
        _string(name, f"{where}.namespaces[{i}]")
        for i, name in enumerate(_sequence(item.get("namespaces"), f"{where}.namespaces"))
    )
    selector = None if item.get("podSelector") is None else _selector(item["podSelector"], f"{where}.podSelector")
    if not namespaces and selector is None:
        raise PolicyConfigError(f"{where}: a tenant needs namespaces, a podSelector or both")
    return Tenant(tier=tier, namespaces=namespaces, selector=selector)


def _selector(value: Any, where: str) -> Selector:
    """A label selector as Kubernetes writes one (matchLabels, matchExpressions), validated as the API
    server validates it. An empty selector would select every node or pod: refused as a likely mistake."""
    item = _mapping(value, where, ("matchLabels", "matchExpressions"))
    labels = _mapping(item.get("matchLabels"), f"{where}.matchLabels", None)
    expressions = []
    for i, entry in enumerate(_sequence(item.get("matchExpressions"), f"{where}.matchExpressions")):
        path = f"{where}.matchExpressions[{i}]"
        expression = _mapping(entry, path, ("key", "operator", "values"))
        operator = _string(expression.get("operator"), f"{path}.operator")
        parsed = _SELECTOR_OPERATORS.get(operator)
        if parsed is None:
            accepted = ", ".join(_SELECTOR_OPERATORS)
            raise PolicyConfigError(f"{path}.operator: {operator!r} is not accepted; accepted: {accepted}")
        values = tuple(
            _string(v, f"{path}.values[{j}]")
            for j, v in enumerate(_sequence(expression.get("values"), f"{path}.values"))
        )
        if (parsed in (Operator.IN, Operator.NOT_IN)) != bool(values):
            raise PolicyConfigError(f"{path}.values: In and NotIn need values, Exists and DoesNotExist take none")
        expressions.append(Requirement(_string(expression.get("key"), f"{path}.key"), parsed, values))
    match_labels = tuple(sorted((key, _string(v, f"{where}.matchLabels[{key!r}]")) for key, v in labels.items()))
    if not match_labels and not expressions:
        raise PolicyConfigError(f"{where}: an empty selector selects everything; give matchLabels or matchExpressions")
    try:
        return parse_label_selector(LabelSelector(match_labels=match_labels, match_expressions=tuple(expressions)))
    except SelectorError as error:
        raise PolicyConfigError(f"{where}: {error}") from None


def _weight(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PolicyConfigError(f"{where}: {value!r} is not a number; accepted: 0 (off) to {MAX_WEIGHT:g}")
    if not 0 <= value <= MAX_WEIGHT:
        raise PolicyConfigError(f"{where}: {value!r} is out of range; accepted: 0 (off) to {MAX_WEIGHT:g}")
    return float(value)


def _mapping(value: Any, where: str, keys: Sequence[str] | None) -> Mapping[str, Any]:
    """A mapping (absent: empty); ``keys`` the keys accepted (None: any string key)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyConfigError(f"{where} must be a mapping")
    unknown = sorted(str(key) for key in value if keys is not None and key not in keys)
    if unknown:
        raise PolicyConfigError(f"{where}: unknown key {unknown[0]!r}; accepted: {', '.join(keys or ())}")
    return value


def _sequence(value: Any, where: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PolicyConfigError(f"{where} must be a list")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise PolicyConfigError(f"{where} must be a string, got {value!r}")
    return value
