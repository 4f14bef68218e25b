"""One pod's kube-scheduler constraints against the cluster: what the decisions call to filter and score."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from placement.core.constraints.cache import ConstraintCache
from placement.core.constraints.constraint_types import Labels, PodConstraints
from placement.core.constraints.filtering import constraint_filter
from placement.core.constraints.scores import constraint_scores
from placement.core.constraints.verdicts import SCORE_WEIGHTS, ConstraintVerdict, merge_with_resources
from placement.core.constraints.view import ClusterView
from placement.core.feasibility import FilterResult
from placement.core.scoring import Scores, with_constraint_scores
from placement.core.vocabulary import IntArray

PLUGIN_WEIGHTS: Mapping[str, int] = dict(SCORE_WEIGHTS)


@dataclass(frozen=True)
class PodInCluster:
    """A pod (its namespace, labels and constraints) and the cluster it is judged in; read under the view's
    lock. ``cache`` is the view's memo, kept across decisions."""

    view: ClusterView
    cache: ConstraintCache
    namespace: str
    labels: Labels
    constraints: PodConstraints
    # The workload policies' components (``placement.state.workload_scores``), added after the plugins'.
    policies: Callable[[Scores], Scores] | None = None

    def verdict(self, rows: IntArray) -> ConstraintVerdict:
        if self.constraints.constrains_nothing():
            self.cache.bind(self.view)
            refusing_nodes, _ = self.cache.node_rules()
            placed = self.cache.placed()
            if not refusing_nodes and not (placed.any_terms and placed.required_anti()):
                return ConstraintVerdict.passing(rows)  # what the plugins would answer, without running them
        if self.constraints.claims:  # a claim's binding bumps no version: judged afresh every time
            return constraint_filter(self.view, rows, self.namespace, self.labels, self.constraints, cache=self.cache)
        self.cache.bind(self.view)
        key = (self.namespace, self.labels, self.constraints)
        return self.cache.kept_verdict(key, self._every_slot).at(np.asarray(rows, dtype=np.int64))

    def _every_slot(self) -> ConstraintVerdict:
        slots = np.arange(self.view.capacity, dtype=np.int64)
        return constraint_filter(self.view, slots, self.namespace, self.labels, self.constraints, cache=self.cache)

    def filtered(self, resources: FilterResult) -> FilterResult:
        """The resource verdict of ``resources.rows`` merged with the constraints' in kube-scheduler's order."""
        return merge_with_resources(resources, self.verdict(resources.rows))

    def scored(self, scores: Scores) -> Scores:
        """``scores`` (of nodes that passed the filter) with the constraint plugins' scores added, then the
        workload policies' components."""
        return self.policy_scored(self.plugin_scored(scores))

    def policy_scored(self, scores: Scores) -> Scores:
        """``scores`` with the workload policies' components added (as they are: none configured)."""
        return scores if self.policies is None else self.policies(scores)

    def plugin_scored(self, scores: Scores) -> Scores:
        """``scores`` with kube-scheduler's constraint plugins' scores added."""
        if self.constraints.constrains_nothing():
            self.cache.bind(self.view)
            _, preferring_nodes = self.cache.node_rules()
            placed = self.cache.placed()
            if not preferring_nodes and not (placed.any_terms and placed.scored()):
                return scores  # every plugin would score every node alike: nothing to add
        plugins = constraint_scores(
            self.view, scores.rows, self.namespace, self.labels, self.constraints, cache=self.cache
        )
        return with_constraint_scores(scores, plugins, PLUGIN_WEIGHTS)
