"""The placement service's plugins, one folder each, and their registry (``framework.registry`` says why this
order).

| plugin | Filter | Score | Reserve | ReserveGroup | Permit | PostFilter |
|---|---|---|---|---|---|---|
| NodeResources (NUMA admission) | opens | opens (topology score) | | | | |
| KubeConstraints | x | x | | | | |
| Gangs | | | closes held nodes | x | x | |
| WorkloadPolicies | | x | drivers, executors | | | |
| DynamicResources | x | x | | | | |
| GpuTopology | exact plan | | | | | |
| Preemption | | | | | | x |

Reserve's decision for any other pod is the framework's assume cache (``placement.state.reservations``): it
ranks the open nodes with the same rules, then plans each best first with the functions behind GpuTopology's and
DynamicResources' checks (``plan_on_slot``, ``choose_devices``) until one holds (docs/architecture.md says why
not through the plugins).
"""

from __future__ import annotations

from placement.service.framework.registry import Factory
from placement.service.plugins.dynamic_resources import DynamicResources
from placement.service.plugins.gangs import Gangs
from placement.service.plugins.gpu_topology import GpuTopology
from placement.service.plugins.kube_constraints import KubeConstraints
from placement.service.plugins.node_resources import NodeResources
from placement.service.plugins.preemption import Preemption
from placement.service.plugins.workload_policies import WorkloadPolicies

REGISTRY: tuple[tuple[str, Factory], ...] = (
    (NodeResources.name, NodeResources),
    (KubeConstraints.name, KubeConstraints),
    (Gangs.name, Gangs.over),
    (WorkloadPolicies.name, WorkloadPolicies),
    (DynamicResources.name, DynamicResources),
    (GpuTopology.name, GpuTopology),
    (Preemption.name, Preemption),
)
