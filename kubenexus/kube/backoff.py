"""Capped exponential backoff with jitter: a fleet that lost the API server does not return in lockstep."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base_s: float = 0.5
    max_s: float = 30.0

    def delay(self, failures: int, rng: random.Random) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1 for the first).

        Doubles from ``base_s`` up to ``max_s``; the lower half bound keeps every wait useful.
        """
        ceiling = min(self.max_s, self.base_s * 2 ** max(0, failures - 1))
        return rng.uniform(ceiling / 2, ceiling)
