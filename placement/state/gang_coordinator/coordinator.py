"""The gang coordinator: its roles together (see the package's docstring for the life of a group)."""

from __future__ import annotations

from placement.state.gang_coordinator.membership import GangMembership
from placement.state.gang_coordinator.queue import GangQueue


class GangCoordinator(GangMembership, GangQueue):
    """Pod groups over a ``ClusterIndex`` and its ``Reservations``; see the package docstring."""
