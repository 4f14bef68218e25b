"""The scheduling constraints of a pod and the facts of nodes and placed pods they are judged against.

Frozen mirrors of the Kubernetes API types kube-scheduler's plugins read (``k8s.io/api/core/v1``):
``NodeSelectorRequirement``, ``NodeSelectorTerm``, ``NodeAffinity``, ``LabelSelector``,
``PodAffinityTerm``, ``Taint``, ``Toleration``, ``TopologySpreadConstraint``, ``ContainerPort`` (host
ports). Labels are sorted ``(key, value)`` tuples so that every value here is hashable: plugins memoise on
them. Parsing and validation live in ``placement.core.pods``; semantics in the plugin modules.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]  # sorted by key


class Operator(enum.StrEnum):
    """NodeSelectorOperator (all six) and LabelSelectorOperator (the first four)."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSelectorTerm:
    """ANDed requirements; ``match_fields`` supports ``metadata.name`` only, as the API server validates."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True)
class PreferredSchedulingTerm:
    weight: int  # 1..100
    preference: NodeSelectorTerm


@dataclass(frozen=True)
class NodeAffinity:
    # None: no required node affinity. The terms are ORed; a term without requirements matches nothing.
    required: tuple[NodeSelectorTerm, ...] | None = None
    preferred: tuple[PreferredSchedulingTerm, ...] = ()


@dataclass(frozen=True)
class LabelSelector:
    """ANDed ``match_labels`` and ``match_expressions``; an empty selector matches everything."""

    match_labels: Labels = ()
    match_expressions: tuple[Requirement, ...] = ()


@dataclass(frozen=True)
class PodAffinityTerm:
    topology_key: str
    label_selector: LabelSelector | None = None  # None matches no pod
    namespaces: tuple[str, ...] = ()  # with namespace_selector None and namespaces (): the pod's own
    namespace_selector: LabelSelector | None = None  # an empty selector: every namespace
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class WeightedPodAffinityTerm:
    weight: int  # 1..100
    term: PodAffinityTerm


@dataclass(frozen=True)
class PodAffinity:
    """``podAffinity`` or ``podAntiAffinity``: required terms (all must hold) and preferred ones (scored)."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()


class TaintEffect(enum.StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True)
class Taint:
    key: str
    effect: TaintEffect
    value: str = ""


class TolerationOperator(enum.StrEnum):
    EQUAL = "Equal"
    EXISTS = "Exists"


@dataclass(frozen=True)
class Toleration:
    key: str = ""  # "" with Exists: every key
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None  # None: every effect
    toleration_seconds: int | None = None


class WhenUnsatisfiable(enum.StrEnum):
    DO_NOT_SCHEDULE = "DoNotSchedule"
    SCHEDULE_ANYWAY = "ScheduleAnyway"


class InclusionPolicy(enum.StrEnum):
    HONOR = "Honor"
    IGNORE = "Ignore"


@dataclass(frozen=True)
class TopologySpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: WhenUnsatisfiable
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: InclusionPolicy = InclusionPolicy.HONOR
    node_taints_policy: InclusionPolicy = InclusionPolicy.IGNORE
    match_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostPort:
    port: int
    protocol: str = "TCP"  # TCP, UDP, SCTP
    host_ip: str = ""  # "" or 0.0.0.0: every address


@dataclass(frozen=True)
class GpuRequirements:
    """What a pod asks of its node's GPUs (the ``gpu.scheduling.kubenexus.io`` annotations), judged on the
    labels NVIDIA GPU Feature Discovery publishes on the node (``placement.core.constraints.gpu_labels``).
    Ours, not a Kubernetes type; set only on a pod that asks for GPUs."""

    min_memory: str = ""  # the annotation as written, for refusals to quote; "": any memory
    min_memory_mib: int = 0  # the same in MiB (GFD's unit), rounded up; 0: any memory
    models: tuple[str, ...] = ()  # accepted nvidia.com/gpu.product values; (): any model


@dataclass(frozen=True)
class PodConstraints:
    """What kube-scheduler reads of a pod besides its resources (the pod's namespace and labels travel with
    the pod itself). The default value constrains nothing."""

    node_name: str = ""
    node_selector: Labels = ()
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    scheduling_gates: tuple[str, ...] = ()
    priority: int | None = None  # None: not resolved yet (a priorityClassName, or the global default)
    priority_class_name: str = ""
    claims: tuple[str, ...] = ()  # the PersistentVolumeClaims its volumes name, in the pod's namespace
    gpu: GpuRequirements | None = None  # None: any GPU will do (or the pod asks for none)

    def constrains_nothing(self) -> bool:
        """No field a filter or score plugin reads is set (the priority is for the queue, not the plugins):
        only the nodes and the placed pods' terms can refuse such a pod or score it unevenly."""
        return not (
            self.node_name
            or self.node_selector
            or self.node_affinity
            or self.pod_affinity
            or self.pod_anti_affinity
            or self.tolerations
            or self.topology_spread
            or self.host_ports
            or self.scheduling_gates
            or self.claims
            or self.gpu is not None
        )


@dataclass(frozen=True)
class ClaimFacts:
    """What the scheduler can judge of a PersistentVolumeClaim (``VolumeBinding``, in the part supported)."""

    bound: bool  # bound to a PersistentVolume
    # The bound volume's spec.nodeAffinity.required terms (ORed); None: the volume fits any node.
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    wait_for_first_consumer: bool = False  # unbound, and its StorageClass binds when a pod first uses it


@dataclass(frozen=True)
class NodeFacts:
    """What kube-scheduler reads of a Node besides its resources."""

    name: str
    labels: Labels = ()
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False  # spec.unschedulable: cordoned


@dataclass(frozen=True)
class PlacedPod:
    """What the inter-pod plugins and NodePorts read of a pod already bound to (or reserved on) a node, and
    what preemption reads of it (its priority, its group, whether Kueue admitted it)."""

    namespace: str
    name: str
    node: str
    labels: Labels = ()
    host_ports: tuple[HostPort, ...] = ()
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None
    priority: int = 0  # spec.priority: preemption evicts only pods of lower priority
    group: str = ""  # "namespace/name" of the pod group it belongs to: evicted whole, never in part
    workload: str = ""  # "Kind/name" of its controller's workload (Deployment, StatefulSet, ...): what services spread
    uid: str = ""  # metadata.uid: how kube-scheduler's extender preemption names a victim (MetaPod.UID)
    kueue_admitted: bool = False  # Kueue admitted it (placement.core.kueue): Kueue evicts it, never preemption here
