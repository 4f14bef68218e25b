"""The workload the fragmentation score measures against, learned from the pods the service sees.

A decayed histogram of pod shapes (``placement.core.fragmentation.PodShape``): every pod counts once, when
the index first learns of it (bound by the watch or reserved by us), and older pods fade with a half-life
counted in pods, so the target follows a workload that changes. It starts from a prior (by default
``DEFAULT_SHAPES``, worth ``prior_pods`` pods) that fades the same way. The folded tables
(``TargetWorkload``) are rebuilt every ``refresh_pods`` pods, not on every pod: a decision reads them on
the hot path, and one pod hardly moves a histogram of thousands (early on, after every sixteenth more
pods: the first pods move it most).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from placement.core.vocabulary import DEFAULT_SHAPES, PodDemand, PodShape, TargetWorkload, shape_of

DEFAULT_HALF_LIFE_PODS = 5000.0
DEFAULT_PRIOR_PODS = 10.0
DEFAULT_REFRESH_PODS = 64
MAX_SHAPES = 256  # beyond it the lightest shapes are dropped (distinct CPU requests can be many)
_RESCALE_AT = 1e12


class WorkloadModel:
    """Not thread-safe on its own: the cluster index calls it under its lock."""

    def __init__(
        self,
        *,
        prior: Mapping[PodShape, float] = DEFAULT_SHAPES,
        prior_pods: float = DEFAULT_PRIOR_PODS,
        half_life_pods: float = DEFAULT_HALF_LIFE_PODS,
        refresh_pods: int = DEFAULT_REFRESH_PODS,
        learn: bool = True,
    ) -> None:
        if prior_pods <= 0 or half_life_pods <= 0 or refresh_pods < 1:
            raise ValueError("prior_pods and half_life_pods must be positive, refresh_pods at least 1")
        total = sum(prior.values())
        self._weights = {shape: prior_pods * weight / total for shape, weight in prior.items() if weight > 0}
        self._growth = 2.0 ** (1.0 / half_life_pods)
        # Instead of shrinking every weight by the decay on each pod, the next pod's weight grows by it.
        self._unit = 1.0
        self._refresh = refresh_pods
        self._learn = learn
        self._since_build = 0
        self._target = TargetWorkload.of(self._weights)
        self.observed = 0

    @classmethod
    def fixed(cls, weights: Mapping[PodShape, float]) -> WorkloadModel:
        """A workload given up front (the simulator gives the trace's shapes): pods seen change nothing."""
        return cls(prior=weights, learn=False)

    def observe(self, demand: PodDemand, gpu_models: tuple[str, ...] = ()) -> None:
        """One more pod of the workload; ``gpu_models``: the GPU models its rules accept (() any)."""
        if not self._learn:
            return
        self.observed += 1
        shape = shape_of(demand)
        if gpu_models and shape.gpus:
            shape = replace(shape, gpu_models=gpu_models)
        self._weights[shape] = self._weights.get(shape, 0.0) + self._unit
        self._unit *= self._growth
        if self._unit > _RESCALE_AT:
            self._weights = {s: w / self._unit for s, w in self._weights.items()}
            self._unit = 1.0
        if len(self._weights) > MAX_SHAPES:
            lightest = min(self._weights, key=lambda s: self._weights[s])
            del self._weights[lightest]
        self._since_build += 1
        # Early on each pod moves the histogram a lot: rebuild after a sixteenth more pods, up to the cadence.
        if self._since_build >= min(self._refresh, max(1, self.observed // 16)):
            self._target = TargetWorkload.of(self._weights)
            self._since_build = 0

    def target(self) -> TargetWorkload:
        """The workload as of the last rebuild."""
        return self._target
