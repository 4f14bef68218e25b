"""What the plugins are built over, as kube-scheduler's ``framework.Handle``: the cluster index and the caches the
whole service shares (the assume cache, the kept verdicts, the nominated nodes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from placement.core.domains import DEFAULT_LEVELS, TopologyLevels
from placement.service.gang_port import GangPort
from placement.state.cluster_index import ClusterIndex
from placement.state.decision_cache import DecisionCache
from placement.state.driver_reservations import DriverReservations
from placement.state.nominations import Nominations
from placement.state.reservations import Reservations


@dataclass(frozen=True)
class Handle:
    index: ClusterIndex
    reservations: Reservations  # the assume cache: what Reserve holds until the pod binds
    verdicts: DecisionCache  # each node's Filter verdict and score components per pod shape
    nominations: Nominations  # nodes held for preemptors while their victims leave
    gangs: GangPort | None = None  # None: gang scheduling is not configured
    drivers: DriverReservations | None = None  # None: Reserve decides every pod alone
    clock: Callable[[], float] = time.monotonic  # the reservations' clock: turns their expiry into a TTL

    @property
    def levels(self) -> TopologyLevels:
        """The cluster's topology levels, which a group's constraints name."""
        return self.gangs.levels if self.gangs is not None else DEFAULT_LEVELS
