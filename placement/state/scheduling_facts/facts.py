"""The scheduling facts: their roles together (see the package's docstring)."""

from __future__ import annotations

from placement.state.scheduling_facts.cluster_objects import FactsObjects
from placement.state.scheduling_facts.placed_pods import FactsPods


class SchedulingFacts(FactsObjects, FactsPods):
    """The ``ClusterView`` over the index's slots, plus what the service resolves requests with (priority
    classes); see the module docstring."""
