"""A faithful model of the kubelet Topology Manager (Kubernetes 1.32-1.37) and its hint providers.

``admit(node, pod)`` predicts whether the kubelet admits the pod and with which NUMA affinity per
container; a node it rejects must never be offered as feasible. Judged by the kubelet v1.37.2's own managers
in tests/upstream/test_oracle_kubelet.py (docs/placement.md, "Checked against the kubelet itself").
"""

from placement.core.topology_manager.admission import (
    TOPOLOGY_AFFINITY_ERROR,
    TOPOLOGY_AFFINITY_MESSAGE,
    TOPOLOGY_MANAGER_UNAVAILABLE,
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionResult,
    ContainerAffinity,
    admit,
)
from placement.core.topology_manager.admission_inputs import (
    Container,
    CpuManagerPolicy,
    DeviceGroup,
    KubeletConfig,
    MemoryManagerPolicy,
    MemoryPool,
    NodeResources,
    NumaCellResources,
    Pod,
    QOSClass,
    TopologyScope,
)
from placement.core.topology_manager.bitmask import NumaMask
from placement.core.topology_manager.merge import (
    NumaInfo,
    PolicyOptionError,
    PolicyOptions,
    TopologyHint,
    TopologyPolicy,
    parse_policy_options,
    policy_merge,
)

__all__ = [
    "TOPOLOGY_AFFINITY_ERROR",
    "TOPOLOGY_AFFINITY_MESSAGE",
    "TOPOLOGY_MANAGER_UNAVAILABLE",
    "UNEXPECTED_ADMISSION_ERROR",
    "AdmissionResult",
    "Container",
    "ContainerAffinity",
    "CpuManagerPolicy",
    "DeviceGroup",
    "KubeletConfig",
    "MemoryManagerPolicy",
    "MemoryPool",
    "NodeResources",
    "NumaCellResources",
    "NumaInfo",
    "NumaMask",
    "Pod",
    "PolicyOptionError",
    "PolicyOptions",
    "QOSClass",
    "TopologyHint",
    "TopologyPolicy",
    "TopologyScope",
    "admit",
    "parse_policy_options",
    "policy_merge",
]
