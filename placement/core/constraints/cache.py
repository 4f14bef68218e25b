"""What the vectorised constraint plugins compute once and reuse: per-slot masks and counts, memoised.

A decision must not pay per node for a pod's selectors: each distinct requirement, term, toleration set or
selector becomes one mask over every slot, computed once while the view's ``labels_version`` stands, and
read by fancy indexing afterwards. Placed pods are handled in groups of identical (namespace, labels): a
selector is evaluated once per group, and the pods it matches are counted per slot with one ``bincount``.

Three lifetimes:

* while ``labels_version`` stands: requirement, term and affinity masks, taint verdicts, name lookups;
* while ``pods_version`` stands: the placed pods' groups and terms as arrays, per-selector slot counts;
* for as long as the pods themselves live: what each placed pod object resolves to (its group, its
  terms), kept by object identity (the object is held so its id stays its own), so a new
  ``pods_version`` costs one sorted search over the pods' ids and the parsing of the new pods only.
  Groups and term verdicts over groups persist the same way and are dropped together when most of what
  they describe is gone.

``ConstraintCache`` serves one view; handed another view, it starts over. The state keeps one next to its
``ClusterView``; the plugins take it as an argument, so nothing here is global.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from placement.core.constraints.constraint_types import (
    Labels,
    NodeSelectorTerm,
    Operator,
    PlacedPod,
    PodAffinity,
    PreferredSchedulingTerm,
    Requirement,
    Taint,
    TaintEffect,
    Toleration,
    TopologySpreadConstraint,
    WhenUnsatisfiable,
)
from placement.core.constraints.selectors import (
    NODE_NAME_FIELD,
    Selector,
    SelectorError,
    blocks_scheduling,
    is_empty_term,
    requirement_matches,
    sanitized_port,
    taint_order,
    term_error,
    tolerated,
)
from placement.core.constraints.terms import (
    HARD_POD_AFFINITY_WEIGHT,
    AffinityTerm,
    IncomingPod,
    PodTerms,
    SpreadConstraint,
    incoming_terms,
    placed_pod_terms,
    spread_constraints,
)
from placement.core.constraints.verdicts import ConstraintVerdict
from placement.core.constraints.view import ClusterView
from placement.core.vocabulary import BoolArray, IntArray

MAX_MEMO = 4096  # entries per memo before it starts over: a guard against unbounded pod shapes
_SPARE = 4096  # pods or groups remembered beyond twice the live ones before the registry starts over
_NONE = -1
_KEPT_VERDICTS = 256  # pods' verdicts kept at once (each an int16 per slot)
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


@dataclass(frozen=True)
class Untolerated:
    """A toleration set's verdict on every slot: the NoSchedule/NoExecute taints it does not tolerate, in
    ``taint_order``, and per slot the position of the first one the slot carries (-1: none)."""

    taints: tuple[Taint, ...]
    first: IntArray


@dataclass(frozen=True)
class _Signature:
    """The inter-pod terms one or more placed pods hold, by term id."""

    required_anti: tuple[int, ...]
    required_affinity: tuple[int, ...]
    preferred: tuple[tuple[int, int], ...]  # (term, +weight for affinity / -weight for anti-affinity)


_NO_TERMS = _Signature((), (), ())


@dataclass(frozen=True)
class TermSlots:
    """A placed pods' term and the slots of the pods holding it (a slot once per pod)."""

    term: AffinityTerm
    weight: int
    slots: IntArray


class PlacedPods:
    """The placed pods at one ``pods_version``, as arrays; the parts are made when first asked for."""

    def __init__(self, cache: ConstraintCache, pods: Sequence[PlacedPod], slots: IntArray, capacity: int) -> None:
        self._cache = cache
        self.pods = pods
        self.slots = slots
        self.capacity = capacity
        self._groups: IntArray | None = None
        self._signatures: IntArray | None = None
        self._anti: tuple[TermSlots, ...] | None = None
        self._scored: tuple[TermSlots, ...] | None = None
        self._any_terms: bool | None = None
        self._by_signature: dict[int, IntArray] | None = None
        self._ports: dict[tuple[str, int], tuple[IntArray, tuple[str, ...]]] | None = None

    @property
    def any_terms(self) -> bool:
        """Whether any placed pod holds an inter-pod term (a scan that stops at the first)."""
        if self._any_terms is None:
            self._any_terms = any(p.pod_affinity is not None or p.pod_anti_affinity is not None for p in self.pods)
        return self._any_terms

    @property
    def groups(self) -> IntArray:
        """Per placed pod, its (namespace, labels) group in the cache's registry."""
        if self._groups is None:
            self._groups, self._signatures = self._cache.resolve(self.pods)
        return self._groups

    @property
    def signatures(self) -> IntArray:
        if self._signatures is None:
            self._groups, self._signatures = self._cache.resolve(self.pods)
        return self._signatures

    def required_anti(self) -> tuple[TermSlots, ...]:
        """The placed pods' required anti-affinity terms, each with the slots of the pods holding it."""
        if self._anti is None:
            self._anti = self._collect(lambda s: tuple((t, 1) for t in s.required_anti)) if self.any_terms else ()
        return self._anti

    def scored(self) -> tuple[TermSlots, ...]:
        """The placed pods' terms the incoming pod is scored against: required affinity (weighing
        ``hardPodAffinityWeight``) and preferred affinity and anti-affinity (+/- their weights)."""
        if self._scored is None:
            self._scored = self._collect(_scored_terms) if self.any_terms else ()
        return self._scored

    def group_namespaces(self) -> tuple[IntArray, tuple[str, ...]]:
        """Per group, the position of its namespace in the returned namespaces."""
        self.groups  # noqa: B018 - the registry holds these pods' groups once they are resolved
        return self._cache.group_namespaces()

    def selector_groups(self, selector: Selector) -> BoolArray:
        """Per group, whether ``selector`` matches its labels."""
        self.groups  # noqa: B018 - as above
        return self._cache.selector_groups(selector)

    def counts(self, group_mask: BoolArray) -> IntArray:
        """Per slot, the placed pods whose group ``group_mask`` selects."""
        chosen = group_mask[self.groups]
        counted: IntArray = np.bincount(self.slots[chosen], minlength=self.capacity).astype(np.int64)
        return counted

    def ports(self) -> dict[tuple[str, int], tuple[IntArray, tuple[str, ...]]]:
        """Used host ports by (protocol, port): the slots using it and the IP each uses it on."""
        if self._ports is None:
            found: dict[tuple[str, int], tuple[list[int], list[str]]] = {}
            for position, pod in enumerate(self.pods):
                for port in pod.host_ports:
                    ip, protocol, number = sanitized_port(port)
                    if number > 0:
                        slots, ips = found.setdefault((protocol, number), ([], []))
                        slots.append(int(self.slots[position]))
                        ips.append(ip)
            self._ports = {k: (np.array(s, dtype=np.int64), tuple(i)) for k, (s, i) in found.items()}
        return self._ports

    def _collect(self, terms_of: Callable[[_Signature], tuple[tuple[int, int], ...]]) -> tuple[TermSlots, ...]:
        collected: dict[tuple[int, int], list[IntArray]] = {}
        for signature, slots in self._signature_slots().items():
            for key in terms_of(self._cache.signature(signature)):
                collected.setdefault(key, []).append(slots)
        return tuple(
            TermSlots(self._cache.term(term), weight, np.concatenate(parts))
            for (term, weight), parts in collected.items()
        )

    def _signature_slots(self) -> dict[int, IntArray]:
        """The slots of the pods holding each term signature (pods without terms left out)."""
        if self._by_signature is None:
            signatures = self.signatures
            holding = np.flatnonzero(signatures > 0)
            order = holding[np.argsort(signatures[holding], kind="stable")]
            values, starts = np.unique(signatures[order], return_index=True)
            parts = np.split(self.slots[order], starts[1:]) if len(order) else []
            self._by_signature = dict(zip(values.tolist(), parts, strict=True))
        return self._by_signature


def _scored_terms(signature: _Signature) -> tuple[tuple[int, int], ...]:
    return tuple((t, HARD_POD_AFFINITY_WEIGHT) for t in signature.required_affinity) + signature.preferred


class ConstraintCache:
    """The memo of the vectorised plugins for one ``ClusterView`` (see the module docstring)."""

    def __init__(self) -> None:
        self._view: ClusterView | None = None
        # Whatever the versions: the incoming pods' terms and spread constraints, parsed.
        self._pod_terms: dict[tuple[str, Labels, PodAffinity | None, PodAffinity | None], PodTerms | SelectorError] = {}
        self._spread: dict[
            tuple[Labels, tuple[TopologySpreadConstraint, ...], WhenUnsatisfiable],
            tuple[SpreadConstraint, ...] | SelectorError,
        ] = {}
        self._labels_version = _NONE
        self._pods_version = _NONE
        # While labels_version stands.
        self._requirements: dict[Requirement, BoolArray] = {}
        self._terms: dict[tuple[NodeSelectorTerm, bool], BoolArray] = {}
        self._required: dict[tuple[Labels, tuple[NodeSelectorTerm, ...] | None], BoolArray] = {}
        self._preferred: dict[tuple[PreferredSchedulingTerm, ...], IntArray] = {}
        self._untolerated: dict[tuple[Toleration, ...], Untolerated] = {}
        self._prefer_no_schedule: dict[tuple[Toleration, ...], IntArray] = {}
        self._slot_of: dict[str, int] | None = None
        self._unnamed: BoolArray | None = None
        self._occupied: BoolArray | None = None
        self._node_rules: tuple[bool, bool] | None = None
        # While pods_version stands.
        self._placed: PlacedPods | None = None
        self._counts: dict[Hashable, IntArray] = {}
        self._verdicts: dict[Hashable, ConstraintVerdict] = {}  # while both versions stand
        # For as long as what they describe lives. Pod objects seen, held so that their ids stay theirs, and
        # by id (sorted, for a vectorised look-up) their group and term signature.
        self._held: dict[int, PlacedPod] = {}
        self._known_ids: IntArray = np.zeros(0, dtype=np.int64)
        self._known_groups: IntArray = np.zeros(0, dtype=np.int64)
        self._known_signatures: IntArray = np.zeros(0, dtype=np.int64)
        self._group_of: dict[tuple[str, Labels], int] = {}
        self._group_labels: list[dict[str, str]] = []
        self._group_namespace: list[int] = []
        self._namespaces: list[str] = []
        self._namespace_of: dict[str, int] = {}
        self._selector_groups: dict[Selector, BoolArray] = {}
        self._term_of: dict[AffinityTerm, int] = {}
        self._term_list: list[AffinityTerm] = []
        self._signature_of: dict[_Signature, int] = {_NO_TERMS: 0}
        self._signature_list: list[_Signature] = [_NO_TERMS]
        self._signature_of_spec: dict[tuple[str, Labels, PodAffinity | None, PodAffinity | None], int] = {}

    # --- the incoming pod, parsed once per distinct pod whatever the versions --------------------------------

    def pod_terms(self, pod: IncomingPod) -> PodTerms:
        """``terms.incoming_terms`` for the pod, memoised; raises its ``SelectorError`` again."""
        key = (pod.namespace, pod.labels, pod.constraints.pod_affinity, pod.constraints.pod_anti_affinity)
        found = self._pod_terms.get(key)
        if found is None:
            try:
                found = incoming_terms(*key)
            except SelectorError as error:
                found = error
            self._pod_terms[_bounded(self._pod_terms, key)] = found
        if isinstance(found, SelectorError):
            raise found
        return found

    def spread(self, pod: IncomingPod, when: WhenUnsatisfiable) -> tuple[SpreadConstraint, ...]:
        """``terms.spread_constraints`` for the pod, memoised; raises its ``SelectorError`` again."""
        key = (pod.labels, pod.constraints.topology_spread, when)
        found = self._spread.get(key)
        if found is None:
            try:
                found = spread_constraints(pod.constraints, pod.labels, when)
            except SelectorError as error:
                found = error
            self._spread[_bounded(self._spread, key)] = found
        if isinstance(found, SelectorError):
            raise found
        return found

    def bind(self, view: ClusterView) -> None:
        """Makes the memo current for ``view``: what the view's versions no longer vouch for is dropped."""
        if view is not self._view:
            self._forget_groups()
            self._term_of, self._term_list = {}, []
            self._signature_of, self._signature_list = {_NO_TERMS: 0}, [_NO_TERMS]
            self._signature_of_spec = {}
            self._labels_version = self._pods_version = _NONE
            self._view = view
        if view.labels_version != self._labels_version:
            self._labels_version = view.labels_version
            for memo in (self._requirements, self._terms, self._required, self._preferred):
                memo.clear()
            self._untolerated.clear()
            self._prefer_no_schedule.clear()
            self._slot_of = self._unnamed = self._occupied = None
            self._node_rules = None
            self._verdicts.clear()
        if view.pods_version != self._pods_version:
            self._pods_version = view.pods_version
            self._placed = None
            self._counts.clear()
            self._verdicts.clear()

    @property
    def view(self) -> ClusterView:
        if self._view is None:
            raise RuntimeError("the constraint cache is bound to no view")
        return self._view

    # --- per slot, while labels_version stands ----------------------------------------------------------------

    def occupied(self) -> BoolArray:
        """The slots that hold a node."""
        if self._occupied is None:
            self._occupied = np.array([n is not None for n in self.view.node_names()], dtype=np.bool_)
        return self._occupied

    def kept_verdict(self, key: Hashable, judge: Callable[[], ConstraintVerdict]) -> ConstraintVerdict:
        """``judge()``, a verdict over every slot for the pod ``key`` names, kept while both versions stand:
        a scheduler's Score call meets the pod its Filter call judged, and replicas of one template share
        their namespace, labels and constraints. At most ``_KEPT_VERDICTS`` pods are kept."""
        verdict = self._verdicts.get(key)
        if verdict is None:
            if len(self._verdicts) >= _KEPT_VERDICTS:
                self._verdicts.clear()
            verdict = self._verdicts[key] = judge()
        return verdict

    def node_rules(self) -> tuple[bool, bool]:
        """Whether any node refuses a pod that states no constraint (cordoned, or tainted NoSchedule or
        NoExecute), and whether any node scores such pods unevenly (a PreferNoSchedule
        taint): what lets ``PodInCluster`` answer such a pod without running the plugins."""
        if self._node_rules is None:
            view, occupied = self.view, self.occupied()
            taints, matrix = view.taint_columns()
            hard = np.array([t.effect is not TaintEffect.PREFER_NO_SCHEDULE for t in taints], dtype=np.bool_)
            tainted = matrix[occupied]
            refuses = bool(view.unschedulable[occupied].any())
            refuses = refuses or bool(tainted[:, hard].any())
            self._node_rules = (refuses, bool(tainted[:, ~hard].any()))
        return self._node_rules

    def slot_of(self, name: str) -> int | None:
        if self._slot_of is None:
            self._slot_of = {n: s for s, n in enumerate(self.view.node_names()) if n is not None}
        return self._slot_of.get(name)

    def unnamed(self) -> BoolArray:
        """Slots whose node has an empty name: such a node has no fields, so matchFields are not consulted."""
        if self._unnamed is None:
            self._unnamed = np.array([n == "" for n in self.view.node_names()], dtype=np.bool_)
        return self._unnamed

    def requirement(self, requirement: Requirement) -> BoolArray:
        """Per slot, ``requirement`` against the node's labels (valid requirements only)."""
        mask = self._requirements.get(requirement)
        if mask is None:
            codes, values = self.view.label_column(requirement.key)
            key = requirement.key
            # One verdict per distinct value, and the last entry for the slots that lack the key (code -1).
            table = [requirement_matches(requirement, {key: v}) for v in values]
            table.append(requirement_matches(requirement, {}))
            mask = np.array(table, dtype=np.bool_)[codes]
            self._requirements[_bounded(self._requirements, requirement)] = mask
        return mask

    def node_term(self, term: NodeSelectorTerm, *, fields: bool = True) -> BoolArray:
        """Per slot, whether a node selector term matches (an empty or invalid term matches no slot). With
        ``fields`` False the nodes are judged as having no fields, as ``CheckNodeAffinity`` judges a
        volume's node affinity (a node made of labels only): ``matchFields`` is then not consulted."""
        mask = self._terms.get((term, fields))
        if mask is None:
            capacity = self.view.capacity
            if is_empty_term(term) or term_error(term) is not None:
                mask = np.zeros(capacity, dtype=np.bool_)
            else:
                mask = np.ones(capacity, dtype=np.bool_)
                for requirement in term.match_expressions:
                    mask = mask & self.requirement(requirement)
                if term.match_fields and fields:
                    by_field = np.ones(capacity, dtype=np.bool_)
                    for requirement in term.match_fields:
                        by_field &= self._field(requirement)
                    mask = mask & (by_field | self.unnamed())
            self._terms[_bounded(self._terms, (term, fields))] = mask
        return mask

    def _field(self, requirement: Requirement) -> BoolArray:
        """``fields.OneTermEqualSelector`` / ``OneTermNotEqualSelector`` on the node's name; any other field
        reads as ""."""
        capacity, want = self.view.capacity, requirement.values[0]
        equal = np.zeros(capacity, dtype=np.bool_)
        if requirement.key == NODE_NAME_FIELD:
            slot = self.slot_of(want)
            if slot is not None:
                equal[slot] = True
        elif want == "":
            equal[:] = True
        return equal if requirement.operator is Operator.IN else ~equal

    def required_affinity(self, node_selector: Labels, required: tuple[NodeSelectorTerm, ...] | None) -> BoolArray:
        """Per slot, ``RequiredNodeAffinity.Match``: the nodeSelector AND any of the required terms."""
        key = (node_selector, required)
        mask = self._required.get(key)
        if mask is None:
            mask = np.ones(self.view.capacity, dtype=np.bool_)
            for label, value in node_selector:
                mask = mask & self.requirement(Requirement(label, Operator.IN, (value,)))
            if required is not None:
                anyof = np.zeros(self.view.capacity, dtype=np.bool_)
                for term in required:
                    anyof |= self.node_term(term)
                mask = mask & anyof
            self._required[_bounded(self._required, key)] = mask
        return mask

    def preferred_weights(self, preferred: tuple[PreferredSchedulingTerm, ...]) -> IntArray:
        """Per slot, ``PreferredSchedulingTerms.Score``: the weights of the matching terms."""
        weights = self._preferred.get(preferred)
        if weights is None:
            weights = np.zeros(self.view.capacity, dtype=np.int64)
            for term in preferred:
                if term.weight:
                    weights += term.weight * self.node_term(term.preference)
            self._preferred[_bounded(self._preferred, preferred)] = weights
        return weights

    def untolerated(self, tolerations: tuple[Toleration, ...]) -> Untolerated:
        """Per slot, the first NoSchedule/NoExecute taint ``tolerations`` do not tolerate (judged once per
        distinct taint, not per node)."""
        verdict = self._untolerated.get(tolerations)
        if verdict is None:
            taints, carried = self.view.taint_columns()
            columns = sorted(
                (c for c, t in enumerate(taints) if blocks_scheduling(t) and not tolerated(tolerations, t)),
                key=lambda c: taint_order(taints[c]),
            )
            first = np.full(self.view.capacity, _NONE, dtype=np.int64)
            if columns:
                chosen = carried[:, columns]
                some = chosen.any(axis=1)
                first[some] = chosen[some].argmax(axis=1)
            verdict = Untolerated(tuple(taints[c] for c in columns), first)
            self._untolerated[_bounded(self._untolerated, tolerations)] = verdict
        return verdict

    def intolerable_prefer_no_schedule(self, tolerations: tuple[Toleration, ...]) -> IntArray:
        """Per slot, ``countIntolerableTaintsPreferNoSchedule`` with ``tolerations`` (already reduced to
        those of effect PreferNoSchedule or none)."""
        counts = self._prefer_no_schedule.get(tolerations)
        if counts is None:
            taints, carried = self.view.taint_columns()
            columns = [
                c
                for c, t in enumerate(taints)
                if t.effect is TaintEffect.PREFER_NO_SCHEDULE and not tolerated(tolerations, t)
            ]
            counts = np.zeros(self.view.capacity, dtype=np.int64)
            if columns:
                counts = carried[:, columns].sum(axis=1).astype(np.int64)
            self._prefer_no_schedule[_bounded(self._prefer_no_schedule, tolerations)] = counts
        return counts

    # --- placed pods, while pods_version stands -------------------------------------------------------------

    def placed(self) -> PlacedPods:
        if self._placed is None:
            pods, slots = self.view.placed_pods()
            self._placed = PlacedPods(self, pods, np.asarray(slots, dtype=np.int64), self.view.capacity)
        return self._placed

    def counts(self, key: Hashable, group_mask: Callable[[], BoolArray]) -> IntArray:
        """Per slot, the placed pods of the groups ``group_mask`` selects; memoised under ``key`` while
        ``pods_version`` stands (the key must determine the mask at that version)."""
        counted = self._counts.get(key)
        if counted is None:
            counted = self.placed().counts(group_mask())
            self._counts[_bounded(self._counts, key)] = counted
        return counted

    # --- the registry of groups and terms, kept across versions --------------------------------------------

    def resolve(self, pods: Sequence[PlacedPod]) -> tuple[IntArray, IntArray]:
        """Per pod, its group and its term signature. Pod objects seen before are found by identity with one
        sorted search, so a new ``pods_version`` costs the new pods only (the state keeps its objects)."""
        if len(self._held) > 2 * len(pods) + _SPARE or len(self._group_labels) > 2 * len(pods) + _SPARE:
            self._forget_groups()
        ids = np.fromiter(map(id, pods), dtype=np.int64, count=len(pods))
        where = self._find(ids)
        missing = np.flatnonzero(where < 0)
        if missing.size:
            self._learn([pods[i] for i in missing.tolist()])
            where = self._find(ids)
        return self._known_groups[where], self._known_signatures[where]

    def _find(self, ids: IntArray) -> IntArray:
        """Positions of ``ids`` among the known ids, -1 where unknown."""
        known = self._known_ids
        if not len(known):
            return np.full(len(ids), _NONE, dtype=np.int64)
        where = np.minimum(np.searchsorted(known, ids), len(known) - 1)
        found: IntArray = np.where(known[where] == ids, where, _NONE)
        return found

    def _learn(self, pods: list[PlacedPod]) -> None:
        fresh = {id(p): p for p in pods if id(p) not in self._held}
        self._held.update(fresh)
        ids = np.concatenate([self._known_ids, np.fromiter(fresh, dtype=np.int64, count=len(fresh))])
        groups = [self._group(p) for p in fresh.values()]
        signatures = [self._signature(p) for p in fresh.values()]
        order = np.argsort(ids, kind="stable")
        self._known_ids = ids[order]
        self._known_groups = np.concatenate([self._known_groups, np.array(groups, dtype=np.int64)])[order]
        self._known_signatures = np.concatenate([self._known_signatures, np.array(signatures, dtype=np.int64)])[order]

    def group_namespaces(self) -> tuple[IntArray, tuple[str, ...]]:
        """Per group, its namespace's position in the returned namespaces."""
        return np.array(self._group_namespace, dtype=np.int64), tuple(self._namespaces)

    def selector_groups(self, selector: Selector) -> BoolArray:
        """Per group, whether ``selector`` matches its labels; extended as groups are registered."""
        known = self._selector_groups.get(selector)
        total = len(self._group_labels)
        if known is None or len(known) < total:
            start = 0 if known is None else len(known)
            tail = np.array([selector.matches(labels) for labels in self._group_labels[start:]], dtype=np.bool_)
            known = tail if known is None else np.concatenate([known, tail])
            self._selector_groups[_bounded(self._selector_groups, selector)] = known
        return known

    def signature(self, signature: int) -> _Signature:
        return self._signature_list[signature]

    def term(self, term: int) -> AffinityTerm:
        return self._term_list[term]

    def _group(self, pod: PlacedPod) -> int:
        key = (pod.namespace, pod.labels)
        group = self._group_of.get(key)
        if group is None:
            group = self._group_of[key] = len(self._group_labels)
            self._group_labels.append(dict(pod.labels))
            namespace = self._namespace_of.get(pod.namespace)
            if namespace is None:
                namespace = self._namespace_of[pod.namespace] = len(self._namespaces)
                self._namespaces.append(pod.namespace)
            self._group_namespace.append(namespace)
        return group

    def _signature(self, pod: PlacedPod) -> int:
        if pod.pod_affinity is None and pod.pod_anti_affinity is None:
            return 0
        # The replicas of a workload hold equal terms: resolving them once saves the parsing per pod.
        spec = (pod.namespace, pod.labels, pod.pod_affinity, pod.pod_anti_affinity)
        resolved = self._signature_of_spec.get(spec)
        if resolved is None:
            resolved = self._signature_of_spec[_bounded(self._signature_of_spec, spec)] = self._resolved(pod)
        return resolved

    def _resolved(self, pod: PlacedPod) -> int:
        terms = placed_pod_terms(pod)
        signature = _Signature(
            required_anti=tuple(self._term_id(t) for t in terms.required_anti_affinity),
            required_affinity=tuple(self._term_id(t) for t in terms.required_affinity),
            preferred=tuple((self._term_id(w.term), w.weight) for w in terms.preferred_affinity)
            + tuple((self._term_id(w.term), -w.weight) for w in terms.preferred_anti_affinity),
        )
        known = self._signature_of.get(signature)
        if known is None:
            known = self._signature_of[signature] = len(self._signature_list)
            self._signature_list.append(signature)
        return known

    def _term_id(self, term: AffinityTerm) -> int:
        known = self._term_of.get(term)
        if known is None:
            known = self._term_of[term] = len(self._term_list)
            self._term_list.append(term)
        return known

    def _forget_groups(self) -> None:
        """Most registered groups or pods are gone (pods with unique labels come and go): start the registry
        over. What is known of pods refers to groups, so it goes too; term ids stay valid and are kept."""
        self._held = {}
        self._known_ids = np.zeros(0, dtype=np.int64)
        self._known_groups = np.zeros(0, dtype=np.int64)
        self._known_signatures = np.zeros(0, dtype=np.int64)
        self._group_of = {}
        self._group_labels = []
        self._group_namespace = []
        self._namespaces = []
        self._namespace_of = {}
        self._selector_groups = {}
        self._counts.clear()
        self._placed = None


def _bounded(memo: dict[_K, _V], key: _K) -> _K:
    """``key``, after clearing ``memo`` if it is full."""
    if len(memo) >= MAX_MEMO:
        memo.clear()
    return key
