"""Building the profile's plugins from the registry (``placement.service.plugins.REGISTRY``), as kube-scheduler
builds a profile's from ``plugins/registry.go`` in ``default_plugins.go``'s order.

The registry's order is the one every point needs, and the pipeline calls each point's plugins in it:

* Filter: NodeResources opens the verdict (the kubelet's admission and node resources), then KubeConstraints
  merges its own in kube-scheduler's order, GpuTopology confirms with the exact plan (outside Reserve), and
  DynamicResources judges the claims on the rows still open.
* Score: NodeResources opens the topology score, then KubeConstraints, WorkloadPolicies and DynamicResources
  add their components against it (``scoring.with_constraint_scores``).
* Reserve: Gangs closes the nodes held for a starving group before WorkloadPolicies decides a driver or an
  executor into held room; every other pod is ranked by Filter and Score and planned node by node.
* PlanNode: GpuTopology plans the cells and GPUs before DynamicResources chooses devices near them.
"""

from __future__ import annotations

from collections.abc import Callable

from placement.service.framework.extension_points import Plugin
from placement.service.framework.handle import Handle
from placement.service.framework.profile import OPTIONAL, REQUIRED, Profile

# A factory answers None where the handle lacks what the plugin works on (no gang coordinator configured).
Factory = Callable[[Handle], Plugin | None]


def build(registry: tuple[tuple[str, Factory], ...], handle: Handle, profile: Profile) -> tuple[Plugin, ...]:
    """The profile's plugins over ``handle``, in the registry's order."""
    names = [name for name, _ in registry]
    if sorted(names) != sorted(REQUIRED + OPTIONAL):
        raise ValueError(f"the registry lists {names}, the profile knows {REQUIRED + OPTIONAL}")
    plugins = []
    for name, factory in registry:
        plugin = factory(handle) if profile.runs(name) else None
        if plugin is not None:
            if plugin.name != name:
                raise ValueError(f"the factory registered as {name} built {plugin.name}")
            plugins.append(plugin)
    return tuple(plugins)
