"""Hint merge and the four Topology Manager policies (topologymanager policy*.go, numa_info.go).

A port of the kubelet as of Kubernetes 1.32/1.33: ``filterProvidersHints``, ``mergePermutation``,
``HintMerger.compare``/``Merge``, ``maxOfMinAffinityCounts``, ``filterSingleNumaHints``, each policy's
``Merge`` and ``canAdmitPodResult``, and the policy options (``policy_options.go``).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placement.core.topology_manager.bitmask import NumaMask

DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8  # defaultMaxAllowableNUMANodes
PREFER_CLOSEST_NUMA_NODES = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES = "max-allowable-numa-nodes"


class TopologyPolicy(enum.StrEnum):
    """``--topology-manager-policy`` values."""

    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


@dataclass(frozen=True)
class TopologyHint:
    """``TopologyHint``: ``affinity`` None is the kubelet's nil mask ("any NUMA node")."""

    affinity: NumaMask | None
    preferred: bool

    def __str__(self) -> str:
        return f"{{{self.affinity if self.affinity is not None else 'any'} preferred={self.preferred}}}"


# What one hint provider returns for one container (or pod): resource name -> hints. ``None`` for the
# whole map or for one resource means "no preference"; an empty sequence means "cannot be satisfied".
ProviderHints = Mapping[str, Sequence[TopologyHint] | None] | None


class PolicyOptionError(ValueError):
    """A ``--topology-manager-policy-options`` entry the kubelet would refuse to start with."""


@dataclass(frozen=True)
class PolicyOptions:
    prefer_closest_numa: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES


_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # strconv.ParseBool
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_policy_options(raw: Mapping[str, str]) -> PolicyOptions:
    """``NewPolicyOptions``; both options are GA since 1.32, so no feature gate is consulted."""
    prefer_closest = False
    max_nodes = DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    for name, value in raw.items():
        if name == PREFER_CLOSEST_NUMA_NODES:
            if value not in _GO_TRUE | _GO_FALSE:
                raise PolicyOptionError(f'bad value for option "{name}": invalid syntax "{value}"')
            prefer_closest = value in _GO_TRUE
        elif name == MAX_ALLOWABLE_NUMA_NODES:
            try:
                max_nodes = int(value)
            except ValueError:
                raise PolicyOptionError(
                    f'unable to convert policy option to integer "{name}": invalid syntax "{value}"'
                ) from None
            if max_nodes < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                raise PolicyOptionError(
                    f'the minimum value of "{name}" should not be less than {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}'
                )
        else:
            raise PolicyOptionError(f'unknown Topology Manager Policy option: "{name}"')
    return PolicyOptions(prefer_closest_numa=prefer_closest, max_allowable_numa_nodes=max_nodes)


@dataclass(frozen=True)
class NumaInfo:
    """``NUMAInfo``: the node's NUMA ids and SLIT rows (``distances[i]`` is the row of ``nodes[i]``).

    The kubelet indexes a row by the *target id* (``d[node1][node2]``), as sysfs lists one column per
    online node in id order; the port does the same so sparse ids behave as they do on the node.
    """

    nodes: tuple[int, ...]
    distances: tuple[tuple[int, ...], ...] = ()

    def default_affinity(self) -> NumaMask:
        return NumaMask.from_ids(self.nodes)

    def average_distance(self, mask: NumaMask) -> float:
        """``NUMADistances.CalculateAverageFor``: mean over all ordered pairs, self-distances included."""
        bits = mask.ids
        if not bits:
            return 0.0
        rows = dict(zip(self.nodes, self.distances, strict=True))
        total = 0.0
        for a in bits:
            for b in bits:
                total += float(rows[a][b])
        return total / float(len(bits) * len(bits))

    def narrowest(self, m1: NumaMask, m2: NumaMask) -> NumaMask:
        return m1 if m1.is_narrower_than(m2) else m2

    def closest(self, m1: NumaMask, m2: NumaMask) -> NumaMask:
        """``NUMAInfo.Closest``: narrower first; at equal width the lower average distance, then ``IsLessThan``."""
        if m1.count() != m2.count():
            return self.narrowest(m1, m2)
        d1, d2 = self.average_distance(m1), self.average_distance(m2)
        if d1 == d2:
            return m1 if m1.is_less_than(m2) else m2
        return m1 if d1 < d2 else m2


def filter_providers_hints(providers_hints: Sequence[ProviderHints]) -> list[list[TopologyHint]]:
    """``filterProvidersHints``: one hint list per (provider, resource); no preference -> {any, preferred}."""
    all_hints: list[list[TopologyHint]] = []
    for hints in providers_hints:
        if not hints:
            all_hints.append([TopologyHint(None, True)])
            continue
        for resource_hints in hints.values():
            if resource_hints is None:
                all_hints.append([TopologyHint(None, True)])
            elif len(resource_hints) == 0:
                all_hints.append([TopologyHint(None, False)])
            else:
                all_hints.append(list(resource_hints))
    return all_hints


def merge_permutation(default_affinity: NumaMask, permutation: Sequence[TopologyHint]) -> TopologyHint:
    """``mergePermutation``: AND the masks; preferred only if every hint is preferred AND all masks are equal."""
    preferred = True
    first: NumaMask | None = None
    merged = default_affinity
    for hint in permutation:
        if hint.affinity is not None:
            if first is None:
                first = hint.affinity
            elif hint.affinity != first:
                preferred = False
            merged = merged & hint.affinity
        if not hint.preferred:
            preferred = False
    return TopologyHint(merged, preferred)


def max_of_min_affinity_counts(filtered_hints: Sequence[Sequence[TopologyHint]]) -> int:
    """``maxOfMinAffinityCounts``: the widest of each resource's narrowest hint."""
    best = 0
    for resource_hints in filtered_hints:
        narrowest: NumaMask | None = None
        for hint in resource_hints:
            if hint.affinity is None:
                continue
            if narrowest is None or hint.affinity.is_narrower_than(narrowest):
                narrowest = hint.affinity
        if narrowest is not None:
            best = max(best, narrowest.count())
    return best


@dataclass(frozen=True)
class HintMerger:
    """``HintMerger``; ``compare`` is a literal port so that its upstream case table applies unchanged."""

    numa_info: NumaInfo
    hints: tuple[tuple[TopologyHint, ...], ...]
    best_non_preferred_affinity_count: int
    use_closest: bool

    @classmethod
    def create(
        cls,
        numa_info: NumaInfo,
        hints: Sequence[Sequence[TopologyHint]],
        policy: TopologyPolicy,
        options: PolicyOptions,
    ) -> HintMerger:
        return cls(
            numa_info=numa_info,
            hints=tuple(tuple(h) for h in hints),
            best_non_preferred_affinity_count=max_of_min_affinity_counts(hints),
            # NewHintMerger: single-numa-node ignores prefer-closest (every candidate is one node wide).
            use_closest=options.prefer_closest_numa and policy is not TopologyPolicy.SINGLE_NUMA_NODE,
        )

    def compare_masks(self, current: TopologyHint, candidate: TopologyHint) -> TopologyHint:
        """``CompareNUMAAffinityMasks``: keep ``current`` on equal masks."""
        assert current.affinity is not None
        assert candidate.affinity is not None
        if candidate.affinity == current.affinity:
            return current
        if self.use_closest:
            best = self.numa_info.closest(current.affinity, candidate.affinity)
        else:
            best = self.numa_info.narrowest(current.affinity, candidate.affinity)
        return current if best == current.affinity else candidate

    def compare(self, current: TopologyHint | None, candidate: TopologyHint) -> TopologyHint | None:
        """``HintMerger.compare``: the cases are numbered as in the upstream comment."""
        assert candidate.affinity is not None
        if candidate.affinity.count() == 0:
            return current
        if current is None:
            return candidate
        assert current.affinity is not None
        if not current.preferred and candidate.preferred:
            return candidate
        if current.preferred and not candidate.preferred:
            return current
        if current.preferred and candidate.preferred:
            return self.compare_masks(current, candidate)
        # Both non-preferred: get as close as possible to, but not above, bestNonPreferredAffinityCount.
        target = self.best_non_preferred_affinity_count
        current_count, candidate_count = current.affinity.count(), candidate.affinity.count()
        if current_count > target:  # case 1
            return self.compare_masks(current, candidate)
        if current_count == target:  # case 2
            if candidate_count != target:
                return current
            return self.compare_masks(current, candidate)
        if candidate_count > target:  # case 3a
            return current
        if candidate_count == target:  # case 3b
            return candidate
        if candidate_count > current_count:  # case 3ca
            return candidate
        if candidate_count < current_count:  # case 3cb
            return current
        return self.compare_masks(current, candidate)  # case 3cc

    def merge(self) -> TopologyHint:
        """``HintMerger.Merge``: the same answer as folding ``compare`` over every permutation
        (``merge_exhaustive``), without enumerating the cartesian product.

        ``compare`` keeps the better of two hints under a total order (preferred first; preferred by
        narrowest, or closest, mask; non-preferred by the class of the count against
        ``bestNonPreferredAffinityCount``, then the count, then the mask), identical hints being equal, so
        the fold's result is the best DISTINCT merged hint whatever the order. Those are:

        * preferred: every provider's hint preferred and every non-nil mask the same ``m`` (or all nil,
          the default affinity), so ``default & m`` for each ``m`` that every provider offers preferred
          (or a preferred nil hint covers);
        * non-preferred: any reachable AND of one hint per provider, needed only when no preferred
          candidate has a non-empty mask, since any such one beats every non-preferred hint.
        """
        default_affinity = self.numa_info.default_affinity()
        if any(len(hints) == 0 for hints in self.hints):
            return TopologyHint(default_affinity, False)  # no permutation at all
        default_bits = default_affinity.bits
        preferred_masks: list[set[int]] = []  # per provider: its preferred masks' bits
        preferred_any: list[bool] = []  # per provider: a preferred nil hint
        for hints in self.hints:
            preferred_masks.append({h.affinity.bits for h in hints if h.preferred and h.affinity is not None})
            preferred_any.append(any(h.preferred and h.affinity is None for h in hints))
        candidates: set[int] = set()
        if all(preferred_any):
            candidates.add(default_bits)
        for offered in preferred_masks:
            for bits in offered:
                if all(bits in masks or nil for masks, nil in zip(preferred_masks, preferred_any, strict=True)):
                    candidates.add(default_bits & bits)
        best: TopologyHint | None = None
        for bits in sorted(b for b in candidates if b):
            best = self.compare(best, TopologyHint(NumaMask(bits), True))
        if best is not None:
            return best
        reachable = {default_bits}
        for hints in self.hints:
            masks = {~0 if h.affinity is None else h.affinity.bits for h in hints}
            reachable = {r & m for r in reachable for m in masks}
        for bits in sorted(b for b in reachable if b):
            best = self.compare(best, TopologyHint(NumaMask(bits), False))
        return best if best is not None else TopologyHint(default_affinity, False)

    def merge_exhaustive(self) -> TopologyHint:
        """``HintMerger.Merge`` literally: ``compare`` folded over ``iterateAllProviderTopologyHints``
        (the cartesian product). The reference ``merge`` is checked against."""
        default_affinity = self.numa_info.default_affinity()
        best: TopologyHint | None = None
        for permutation in itertools.product(*self.hints):
            best = self.compare(best, merge_permutation(default_affinity, permutation))
        return best if best is not None else TopologyHint(default_affinity, False)


def filter_single_numa_hints(all_hints: Sequence[Sequence[TopologyHint]]) -> list[list[TopologyHint]]:
    """``filterSingleNumaHints``: keep preferred "don't care" hints and preferred one-node hints."""
    return [
        [h for h in hints if h.preferred and (h.affinity is None or h.affinity.count() == 1)] for hints in all_hints
    ]


def can_admit(policy: TopologyPolicy, hint: TopologyHint) -> bool:
    """``canAdmitPodResult`` per policy: best-effort always; restricted and single-numa-node need preferred."""
    if policy in (TopologyPolicy.NONE, TopologyPolicy.BEST_EFFORT):
        return True
    return hint.preferred


def policy_merge(
    policy: TopologyPolicy,
    numa_info: NumaInfo,
    options: PolicyOptions,
    providers_hints: Sequence[ProviderHints],
) -> tuple[TopologyHint, bool]:
    """``Policy.Merge``: the best hint and whether the policy admits it."""
    if policy is TopologyPolicy.NONE:
        return TopologyHint(None, False), True  # nonePolicy.Merge returns TopologyHint{}, true
    filtered = filter_providers_hints(providers_hints)
    if policy is TopologyPolicy.SINGLE_NUMA_NODE:
        filtered = filter_single_numa_hints(filtered)
    best = HintMerger.create(numa_info, filtered, policy, options).merge()
    if policy is TopologyPolicy.SINGLE_NUMA_NODE and best.affinity == numa_info.default_affinity():
        # singleNumaNodePolicy.Merge: an all-nodes answer means "no NUMA preference" (nil mask).
        best = TopologyHint(None, best.preferred)
    return best, can_admit(policy, best)
