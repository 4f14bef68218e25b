"""The placement service's plugins, one folder each, and their registry (``framework.registry`` says why this
order).

| plugin | Filter | Score | Reserve | PlanNode | ReserveGroup | Permit | PostFilter |
|---|---|---|---|---|---|---|---|
| NodeResources (NUMA admission) | opens | opens (topology score) | | | | | |
| KubeConstraints | x | x | | | | | |
| Gangs | | | closes held nodes | | x | x | |
| WorkloadPolicies | | x | drivers, executors | | | | |
| GpuTopology | exact plan (not at Reserve) | | | cells, GPUs | | | |
| DynamicResources | x | x | | devices | | | |
| Preemption | | | | | | | x |

Reserve decides any other pod through the plugins: Filter and Score rank the open nodes, PlanNode plans each best
first until one holds, and the framework's assume cache (``placement.state.reservations``) holds it.
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
    (GpuTopology.name, GpuTopology),
    (DynamicResources.name, DynamicResources),
    (Preemption.name, Preemption),
)
