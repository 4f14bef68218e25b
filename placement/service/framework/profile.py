"""Which plugins run: a profile, as a kube-scheduler profile's ``plugins.multiPoint.disabled`` says it.

The registry's order is fixed (it is the order the points need: ``registry``); a profile only leaves plugins out.
Some cannot be left out: without them the service would place pods that the kubelet refuses at admission or that
kube-scheduler's own plugins refuse, and every answer would look valid and be wrong. The others are features a
cluster may not want: gang scheduling (``Gangs``) and the service's preemption (``Preemption``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# What makes a placement valid at all; the gang coordinator and the preemption search judge with the same rules.
REQUIRED = ("NodeResources", "KubeConstraints", "WorkloadPolicies", "DynamicResources", "GpuTopology")
OPTIONAL = ("Gangs", "Preemption")


class ProfileError(ValueError):
    """A profile that names a plugin the registry lacks, or leaves out a required one."""


@dataclass(frozen=True)
class Profile:
    disabled: frozenset[str] = frozenset()

    @classmethod
    def without(cls, names: Iterable[str]) -> Profile:
        """A profile leaving out ``names``, validated: raises ``ProfileError`` saying what is wrong."""
        disabled = frozenset(name.strip() for name in names if name.strip())
        unknown = sorted(disabled - set(REQUIRED) - set(OPTIONAL))
        if unknown:
            raise ProfileError(
                f"unknown plugin(s) {', '.join(unknown)}; the plugins that may be disabled are {', '.join(OPTIONAL)}"
            )
        required = sorted(disabled & set(REQUIRED))
        if required:
            raise ProfileError(
                f"plugin(s) {', '.join(required)} cannot be disabled: without them the service would place pods "
                f"that the kubelet or kube-scheduler refuses; the plugins that may be disabled are "
                f"{', '.join(OPTIONAL)}"
            )
        return cls(disabled)

    def runs(self, name: str) -> bool:
        return name not in self.disabled
