"""The cluster objects the plugins read by name: namespaces, PriorityClasses, PodDisruptionBudgets, claims with
their volumes and storage classes.
"""

from __future__ import annotations

from placement.core.constraints.constraint_types import (
    ClaimFacts,
    Labels,
    NodeSelectorTerm,
    Operator,
    Requirement,
)
from placement.core.preemption_rules import DisruptionBudget
from placement.state.scheduling_facts.facts_records import (
    ClaimSource,
    FactsState,
    _default_priority,
)


class FactsObjects(FactsState):
    """The objects role: kept by name, not by slot."""

    def namespace_labels(self, namespace: str) -> Labels | None:
        with self.lock:
            return self._namespaces.get(namespace)

    def claim(self, namespace: str, name: str) -> ClaimFacts | None:
        """None also for a claim bound to a volume not seen (yet): it cannot be judged, as upstream cannot."""
        with self.lock:
            source = self._claims.get((namespace, name))
            if source is None:
                return None
            if source.volume:
                if source.volume not in self._volumes:
                    return None
                return ClaimFacts(bound=True, node_affinity=self._volumes[source.volume])
            waits = self._waits_for_consumer.get(source.storage_class, False)
            if not (waits and source.selected_node):
                return ClaimFacts(bound=False, wait_for_first_consumer=waits)
            # Provisioning started for one node: the claim fits only there (upstream's selected-node check).
            only_there = Requirement("metadata.name", Operator.IN, (source.selected_node,))
            return ClaimFacts(
                bound=False,
                node_affinity=(NodeSelectorTerm(match_fields=(only_there,)),),
                wait_for_first_consumer=True,
            )

    def priority(self, class_name: str) -> int | None:
        """The priority a pod naming ``class_name`` gets at admission: "" the global default class's value
        (0 without one); None for a class that does not exist (admission refuses such a pod)."""
        with self.lock:
            if not class_name:
                return self._default_priority
            entry = self._priority_classes.get(class_name)
            return None if entry is None else entry[0]

    def set_priority_class(self, name: str, value: int, *, global_default: bool) -> None:
        with self.lock:
            self._priority_classes[name] = (value, global_default)
            self._default_priority = _default_priority(self._priority_classes)

    def remove_priority_class(self, name: str) -> None:
        with self.lock:
            if self._priority_classes.pop(name, None) is not None:
                self._default_priority = _default_priority(self._priority_classes)

    def disruption_budgets(self) -> tuple[DisruptionBudget, ...]:
        with self.lock:
            return tuple(self._budgets.values())

    def set_disruption_budget(self, budget: DisruptionBudget) -> None:
        with self.lock:
            self._budgets[(budget.namespace, budget.name)] = budget

    def remove_disruption_budget(self, namespace: str, name: str) -> None:
        with self.lock:
            self._budgets.pop((namespace, name), None)

    def set_namespace(self, name: str, labels: Labels) -> None:
        with self.lock:
            if self._namespaces.get(name) != labels:
                self._namespaces[name] = labels
                self._pods_version += 1

    def remove_namespace(self, name: str) -> None:
        with self.lock:
            if self._namespaces.pop(name, None) is not None:
                self._pods_version += 1

    def set_claim(self, namespace: str, name: str, source: ClaimSource) -> None:
        with self.lock:
            self._claims[(namespace, name)] = source

    def remove_claim(self, namespace: str, name: str) -> None:
        with self.lock:
            self._claims.pop((namespace, name), None)

    def set_volume(self, name: str, node_affinity: tuple[NodeSelectorTerm, ...] | None) -> None:
        with self.lock:
            self._volumes[name] = node_affinity

    def remove_volume(self, name: str) -> None:
        with self.lock:
            self._volumes.pop(name, None)

    def set_storage_class(self, name: str, *, wait_for_first_consumer: bool) -> None:
        with self.lock:
            self._waits_for_consumer[name] = wait_for_first_consumer

    def remove_storage_class(self, name: str) -> None:
        with self.lock:
            self._waits_for_consumer.pop(name, None)
