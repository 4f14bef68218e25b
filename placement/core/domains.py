"""Topology levels and the domains a gang's members must, or should, share; pure.

A *level* is a name and the node label keys that say a node's *domain* at that level: the value of the
first of those keys the node carries (two nodes with the same value are in one domain, whichever of the
level's keys gave it). The levels are configured per cluster (``serve --topology-levels``), nearest
first; the defaults (docs/gang.md, "Topology constraints", cites where each key comes from)::

    nvlink  gpu.kubenexus.io/fabric-clique (ours, from the agent), nvidia.com/gpu.clique (GPU Feature
            Discovery), network.topology.nvidia.com/accelerator (Topograph)
    rack    topology.kubenexus.io/rack (ours), network.topology.nvidia.com/leaf and .../block (Topograph,
            today's and the earlier name of the switch tier next to the nodes)
    block   topology.kubenexus.io/block (ours), network.topology.nvidia.com/spine (Topograph)
    zone    topology.kubernetes.io/zone

A constraint names a level (``DomainConstraint.level``): a configured level's name, or a node label key
used as a level of its own (what a native PodGroup's ``schedulingConstraints.topology[].key`` gives).

Planning within domains (``plan_in_domains``) chooses the candidate rows; the gang planner
(``placement.core.gang_plan.plan_gang``, passed in as ``plan``) still plans every member, NUMA cell and GPU
within them, so a constraint composes with the kubelet's admission model on each node.

* Required: every member in one domain, or wait. Each domain that could hold the members by its free
  amounts (``member_capacity``: an upper bound, per member shape) is tried alone, the tightest first (the
  least room left once the members are in, then the fewest nodes, then the name): bin-packing, as the
  placement scoring of KEP-5732 (Topology-aware workload scheduling) prefers with ``MostAllocated``.
  Nodes without the level's labels are never used. Members already placed fix the domain.
* Preferred: the fewest domains. When one domain could hold every member, those that could are tried as
  for required; then domains are added, the largest room first (those holding members already placed
  before any), until the plan succeeds; then every candidate node, labelled or not.
* Several constraints nest, the required ones outermost: required rack + preferred nvlink tries each
  rack, and within it the fewest NVLink domains.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kubenexus.topology.labels import FABRIC_CLIQUE_KEY, MAX_LABEL_VALUE, TOPOLOGY_PREFIX, valid_label_key
from placement.core.annotations import DEFAULT_TOPOLOGY_LEVELS
from placement.core.feasibility import filter_nodes
from placement.core.gang_plan import (
    GangMember,
    GangPlan,
    GangUnplaceable,
    MemberRules,
    describe_demand,
    member_capacity,
)
from placement.core.vocabulary import IntArray, NodeArrays

RACK_KEY = f"{TOPOLOGY_PREFIX}rack"
BLOCK_KEY = f"{TOPOLOGY_PREFIX}block"
ZONE_KEY = "topology.kubernetes.io/zone"
# GPU Feature Discovery's multi-node NVLink clique, "<ClusterUUID>.<CliqueID>" like ours
# (NVIDIA/k8s-device-plugin internal/lm/imex.go).
GFD_CLIQUE_KEY = "nvidia.com/gpu.clique"
# NVIDIA Topograph's node labels (NVIDIA/topograph pkg/engines/k8s/labeler.go; docs/k8s.md for the
# earlier ``block``, the switch tier next to the nodes, renamed ``leaf``).
TOPOGRAPH_ACCELERATOR_KEY = "network.topology.nvidia.com/accelerator"
TOPOGRAPH_LEAF_KEY = "network.topology.nvidia.com/leaf"
TOPOGRAPH_BLOCK_KEY = "network.topology.nvidia.com/block"
TOPOGRAPH_SPINE_KEY = "network.topology.nvidia.com/spine"

# The levels whose domains ``packed`` prefers a node set inside (``placement.core.gang_plan.Locality``), by name.
NVLINK_LEVEL, RACK_LEVEL, ZONE_LEVEL = "nvlink", "rack", "zone"
_DEFAULT_KEYS = {
    "nvlink": (FABRIC_CLIQUE_KEY, GFD_CLIQUE_KEY, TOPOGRAPH_ACCELERATOR_KEY),
    "rack": (RACK_KEY, TOPOGRAPH_LEAF_KEY, TOPOGRAPH_BLOCK_KEY),
    "block": (BLOCK_KEY, TOPOGRAPH_SPINE_KEY),
    "zone": (ZONE_KEY,),
}
# A level's name is what the required-topology and preferred-topology labels carry: a label value, kept
# to lower case so that one level has one spelling.
_LEVEL_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LEVELS_ACCEPTED = (
    "'name=label-key[,label-key...]' entries separated by ';', nearest level first, names of lower-case "
    "letters, digits and '-', e.g. 'rack=topology.kubenexus.io/rack;zone=topology.kubernetes.io/zone'"
)


class TopologyLevelError(ValueError):
    """Topology levels, or a constraint's level, the service refuses; the message says what is accepted."""


@dataclass(frozen=True)
class TopologyLevel:
    """A level: its name and the node label keys that say a node's domain, the first one present winning."""

    name: str
    keys: tuple[str, ...]
    configured: bool = True  # False: a node label key used as a level of its own

    def domain_of(self, labels: Mapping[str, str]) -> str | None:
        """The node's domain at this level: the value of the first of the keys it carries."""
        for key in self.keys:
            value = labels.get(key)
            if value is not None:
                return value
        return None

    @property
    def noun(self) -> str:
        """``rack``; ``topology.kubernetes.io/zone domain`` for a label key used as a level."""
        return self.name if self.configured else f"{self.name} domain"

    @property
    def label_noun(self) -> str:
        """What a node lacks when it is in no domain: ``a rack label``; for a label key used as a level, the
        key, saying that it is not a configured level (a typo of one reads as a key nobody sets)."""
        if self.configured:
            return f"a {self.name} label"
        return f"the node label {self.name} (not a configured level, so read as a node label key)"

    def describe(self) -> str:
        """``rack (topology.kubenexus.io/rack, ...)``: the level with the keys users must look for."""
        return f"{self.name} ({', '.join(self.keys)})" if self.configured else self.noun


@dataclass(frozen=True)
class TopologyLevels:
    """The cluster's levels, nearest first; names and keys each appear once."""

    levels: tuple[TopologyLevel, ...]

    def __post_init__(self) -> None:
        problem = _problem(self.levels)
        if problem is not None:
            raise TopologyLevelError(f"invalid topology levels: {problem}; accepted: {_LEVELS_ACCEPTED}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(level.name for level in self.levels)

    def named(self, name: str) -> TopologyLevel | None:
        return next((level for level in self.levels if level.name == name), None)

    def resolve(self, level: str) -> TopologyLevel:
        """A constraint's level: a configured level by its name, else a node label key as a level of its own."""
        known = self.named(level)
        if known is not None:
            return known
        if valid_label_key(level):
            return TopologyLevel(level, (level,), configured=False)
        raise TopologyLevelError(
            f"invalid topology level {level!r}; accepted: a configured level ({', '.join(self.names)}) "
            "or a node label key, e.g. topology.kubernetes.io/zone"
        )

    def flag_value(self) -> str:
        """The levels as ``--topology-levels`` takes them."""
        return ";".join(f"{level.name}={','.join(level.keys)}" for level in self.levels)


def parse_topology_levels(text: str) -> TopologyLevels:
    """``nvlink=a,b;rack=c;block=d;zone=e`` (nearest first), or ``TopologyLevelError`` saying what is wrong."""
    levels = []
    for entry in text.split(";"):
        if not entry.strip():
            continue  # a trailing ';'
        name, equals, keys = entry.partition("=")
        name = name.strip()
        if not equals:
            raise TopologyLevelError(
                f"invalid topology levels {text!r}: entry {entry.strip()!r} has no '='; accepted: {_LEVELS_ACCEPTED}"
            )
        parsed = tuple(key.strip() for key in keys.split(",") if key.strip())
        levels.append(TopologyLevel(name, parsed))
    problem = _problem(tuple(levels))
    if problem is not None:
        raise TopologyLevelError(f"invalid topology levels {text!r}: {problem}; accepted: {_LEVELS_ACCEPTED}")
    return TopologyLevels(tuple(levels))


def _problem(levels: tuple[TopologyLevel, ...]) -> str | None:
    if not levels:
        return "no level given"
    names: set[str] = set()
    owner: dict[str, str] = {}
    for level in levels:
        if len(level.name) > MAX_LABEL_VALUE or not _LEVEL_NAME.fullmatch(level.name):
            return f"level name {level.name!r} is not a lower-case label value"
        if level.name in names:
            return f"level {level.name!r} is given twice"
        names.add(level.name)
        if not level.keys:
            return f"level {level.name!r} names no node label key"
        for key in level.keys:
            if not valid_label_key(key):
                return f"{key!r} (level {level.name!r}) is not a node label key"
            if key in owner:
                return f"label key {key!r} appears in level {owner[key]!r} and in level {level.name!r}"
            owner[key] = level.name
    return None


DEFAULT_LEVELS = TopologyLevels(tuple(TopologyLevel(name, _DEFAULT_KEYS[name]) for name in DEFAULT_TOPOLOGY_LEVELS))


@dataclass(frozen=True, eq=False)
class DomainMap:
    """A level's domains over the index slots: a code per slot (-1: the node carries none of the keys)."""

    level: TopologyLevel
    codes: IntArray
    values: tuple[str, ...]  # each code's label value

    def value_of(self, row: int) -> str | None:
        code = int(self.codes[row])
        return None if code < 0 else self.values[code]


def domain_map(level: TopologyLevel, domains: Sequence[str | None]) -> DomainMap:
    """Codes for ``domains`` (one per slot: the node's domain at ``level``, None where it has none)."""
    codes: dict[str, int] = {}
    array = np.array([-1 if d is None else codes.setdefault(d, len(codes)) for d in domains], dtype=np.int64)
    return DomainMap(level, array, tuple(codes))


@dataclass(frozen=True)
class LevelConstraint:
    """A ``DomainConstraint`` resolved against the cluster: the level's domains, and whether it is required."""

    domains: DomainMap
    required: bool


PlanRows = Callable[[IntArray], GangPlan | GangUnplaceable]


def plan_in_domains(
    arrays: NodeArrays,
    rows: IntArray,
    members: Sequence[GangMember],
    constraints: Sequence[LevelConstraint],
    plan: PlanRows,
    *,
    rules: Mapping[tuple[str, str], MemberRules] | None = None,
    anchors: Sequence[int] = (),
) -> GangPlan | GangUnplaceable:
    """``plan`` over the rows the constraints allow, domain by domain in the order the module docstring
    gives; the first plan that succeeds, or why none did. ``anchors``: rows already holding members."""
    if not constraints:
        return plan(rows)
    search = _Search(arrays, rows, members, rules=rules or {}, plan=plan, anchors=np.array(anchors, dtype=np.int64))
    return search.within(rows, tuple(sorted(constraints, key=lambda c: not c.required)))


def confine(rows: IntArray, used: Sequence[int], constraints: Sequence[LevelConstraint]) -> IntArray:
    """``rows`` kept to the domains of each required constraint that the rows ``used`` (a plan's) are in."""
    for constraint in constraints:
        if constraint.required and used:
            codes = constraint.domains.codes
            rows = rows[codes[rows] == codes[int(used[0])]]
    return rows


class _Search:
    """The domain-by-domain search for one gang: each member shape's room per slot, computed once."""

    def __init__(
        self,
        arrays: NodeArrays,
        rows: IntArray,
        members: Sequence[GangMember],
        *,
        rules: Mapping[tuple[str, str], MemberRules],
        plan: PlanRows,
        anchors: IntArray,
    ) -> None:
        self._plan = plan
        self._anchors = anchors
        shapes: dict[tuple[object, ...], list[GangMember]] = {}
        for member in members:
            shapes.setdefault((member.demand, member.intent, id(rules.get(member.key))), []).append(member)
        groups = list(shapes.values())
        self.counts = np.array([len(group) for group in groups], dtype=np.int64)
        # Per shape and slot: how many of the shape's members the node could take (an upper bound), capped
        # at the shape's count so that a node asking nothing of a resource does not swamp the sums.
        self.room = np.zeros((len(groups), arrays.numa_count.shape[0]), dtype=np.int64)
        for i, group in enumerate(groups):
            first = group[0]
            admitted = filter_nodes(arrays, rows, first.demand, first.intent if first.intent.constrains else None)
            feasible = admitted.feasible
            room = member_capacity(arrays, rows, first.demand)
            rule = rules.get(first.key)
            if rule is not None:
                feasible = feasible & (rule.at(rows).reason_codes == 0)
                if rule.one_per_node:
                    room = np.minimum(room, 1)
            self.room[i, rows] = np.where(feasible, np.minimum(room, self.counts[i]), 0)
        total = int(self.counts.sum())
        if len(groups) == 1:
            self.what = f"{total} member(s) of {describe_demand(groups[0][0].demand)}"
        else:
            self.what = f"{total} member(s) of {len(groups)} shapes"

    def within(self, rows: IntArray, constraints: tuple[LevelConstraint, ...]) -> GangPlan | GangUnplaceable:
        if not constraints:
            return self._plan(rows)
        if constraints[0].required:
            return self._required(rows, constraints[0].domains, constraints[1:])
        return self._preferred(rows, constraints[0].domains, constraints[1:])

    def _held(self, rows: IntArray, domains: DomainMap) -> tuple[IntArray, IntArray]:
        """Per shape and domain, the members the domain's nodes among ``rows`` could take; nodes per domain."""
        codes = domains.codes[rows]
        known = codes >= 0
        size = len(domains.values)
        held = np.zeros((len(self.counts), size), dtype=np.int64)
        for i in range(len(self.counts)):
            held[i] = np.bincount(codes[known], weights=self.room[i, rows[known]], minlength=size)
        return held, np.bincount(codes[known], minlength=size)

    def _fitting(self, held: IntArray, nodes: IntArray, domains: DomainMap, allowed: IntArray) -> list[int]:
        """The domains among ``allowed`` whose room covers every shape, the tightest first."""
        fits = (held >= self.counts[:, None]).all(axis=0) & (nodes > 0)
        slack = (held - self.counts[:, None]).sum(axis=0)
        chosen = [int(d) for d in allowed if fits[d]]
        return sorted(chosen, key=lambda d: (int(slack[d]), int(nodes[d]), domains.values[d]))

    def _required(
        self, rows: IntArray, domains: DomainMap, rest: tuple[LevelConstraint, ...]
    ) -> GangPlan | GangUnplaceable:
        level = domains.level
        head = f"requires every member in one {level.describe()}"
        held, nodes = self._held(rows, domains)
        unlabelled = int((domains.codes[rows] < 0).sum())
        if not nodes.any():
            return GangUnplaceable(f"{head}: none of the {len(rows)} candidate node(s) has {level.label_noun}", 0)
        allowed = np.flatnonzero(nodes)
        if self._anchors.size:
            placed = set(domains.codes[self._anchors].tolist())
            if len(placed) > 1 or -1 in placed:
                return GangUnplaceable(f"{head}: the members already placed are not in one {level.noun}", 0)
            allowed = np.intersect1d(allowed, np.array(sorted(placed), dtype=np.int64))
        candidates = self._fitting(held, nodes, domains, allowed)
        failure: tuple[int, GangUnplaceable] | None = None
        for code in candidates:
            result = self.within(rows[domains.codes[rows] == code], rest)
            if isinstance(result, GangPlan):
                return result
            failure = failure or (code, result)
        if failure is not None:
            code, why = failure
            return GangUnplaceable(
                f"{head}: {len(candidates)} {level.noun}(s) have room for {self.what} by their free amounts, "
                f"but none can take them all ({level.noun} {domains.values[code]}: {why.reason})",
                why.placed,
            )
        holds = np.minimum(held, self.counts[:, None]).sum(axis=0)
        if self._anchors.size:
            place = f"{domains.values[int(allowed[0])]}" if allowed.size else "outside the candidates"
            room = int(holds[allowed].sum())
            reason = f"{head}: the {level.noun} of the members already placed ({place}) holds {room} of {self.what}"
        else:
            reason = f"{head}: no {level.noun} has room for {self.what}; the largest holds {int(holds.max())}"
        if unlabelled:
            reason += f"; {unlabelled} node(s) have no {level.name} label"
        return GangUnplaceable(reason, 0)

    def _preferred(
        self, rows: IntArray, domains: DomainMap, rest: tuple[LevelConstraint, ...]
    ) -> GangPlan | GangUnplaceable:
        held, nodes = self._held(rows, domains)
        capped = np.minimum(held, self.counts[:, None]).sum(axis=0)
        present = np.flatnonzero((nodes > 0) & (capped > 0))
        anchored = set(domains.codes[self._anchors].tolist()) if self._anchors.size else set()
        singles = self._fitting(held, nodes, domains, present)
        singles.sort(key=lambda d: d not in anchored)  # stable: the tightest first within each part
        for code in singles:
            result = self.within(rows[domains.codes[rows] == code], rest)
            if isinstance(result, GangPlan):
                return result
        by_room = sorted(present.tolist(), key=lambda d: (d not in anchored, -int(capped[d]), domains.values[d]))
        chosen: list[int] = []
        total = np.zeros(len(self.counts), dtype=np.int64)
        for code in by_room:
            chosen.append(code)
            total += held[:, code]
            if len(chosen) < 2 or (total < self.counts).any():
                continue
            subset = rows[np.isin(domains.codes[rows], chosen)]
            result = self.within(subset, rest)
            if isinstance(result, GangPlan) or len(subset) == len(rows):
                return result
        return self.within(rows, rest)  # every candidate node, in a domain of the level or not
