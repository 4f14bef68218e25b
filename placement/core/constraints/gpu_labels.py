"""A pod's GPU requirements as node-label requirements on what NVIDIA GPU Feature Discovery publishes.

GPU Feature Discovery (GFD, part of the NVIDIA GPU Operator) labels each GPU node with its GPUs' model and
memory; the service reads those labels and never writes them::

    nvidia.com/gpu.product   the model, e.g. NVIDIA-H100-80GB-HBM3, NVIDIA-A100-SXM4-40GB
    nvidia.com/gpu.memory    each GPU's memory in MiB as the driver reports it, e.g. 81559

A ``GpuRequirements`` becomes ordinary label requirements (``Gt``, ``In``, ``Exists``) ANDed with the
pod's node affinity, so the vectorised plugins evaluate them with the same memoised masks as any other
requirement (``ConstraintCache.requirement``) and the reference node by node (``selectors``). What
differs is the words: each check refuses with its own reason, in the pod author's terms, instead of
"didn't match Pod's node affinity/selector" for a requirement the pod never wrote. A node without the
labels is refused with a reason saying so: its GPUs' memory or model is unknown, not too small.

The checks run in the NodeAffinity stage, after the pod's own node affinity and selector, memory first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from placement.core.annotations import GPU_MIN_MEMORY_KEY, GPU_MODELS_KEY
from placement.core.constraints.constraint_types import (
    GpuRequirements,
    NodeSelectorTerm,
    Operator,
    PodConstraints,
    Requirement,
)
from placement.core.constraints.selectors import requirement_matches
from placement.core.vocabulary import Rejected, RejectionKind

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

# A positive integer: GFD's value for a GPU it could read. A missing, empty or malformed label fails it.
_MEMORY_KNOWN = Requirement(GPU_MEMORY_LABEL, Operator.GT, ("0",))
_MODEL_KNOWN = Requirement(GPU_PRODUCT_LABEL, Operator.EXISTS)
GPU_MEMORY_UNKNOWN = Rejected(
    f"node(s) had no {GPU_MEMORY_LABEL} label (NVIDIA GPU Feature Discovery): their GPUs' memory is unknown",
    RejectionKind.NODE_CONSTRAINT,
)
GPU_MODEL_UNKNOWN = Rejected(
    f"node(s) had no {GPU_PRODUCT_LABEL} label (NVIDIA GPU Feature Discovery): their GPU model is unknown",
    RejectionKind.NODE_CONSTRAINT,
)


def too_little_memory(gpu: GpuRequirements) -> Rejected:
    """The refusal of a node whose GPUs report less memory than the pod asks, quoting what it wrote."""
    return Rejected(
        f"node(s) had GPUs with less memory than the pod's {GPU_MIN_MEMORY_KEY} "
        f"({gpu.min_memory} = {gpu.min_memory_mib} MiB)",
        RejectionKind.NODE_CONSTRAINT,
    )


def model_not_accepted(gpu: GpuRequirements) -> Rejected:
    """The refusal of a node whose GPU model the pod does not list."""
    return Rejected(
        f"node(s) had no GPU model the pod accepts ({GPU_MODELS_KEY}: {','.join(gpu.models)})",
        RejectionKind.NODE_CONSTRAINT,
    )


@lru_cache(maxsize=256)
def gpu_checks(gpu: GpuRequirements) -> tuple[tuple[Requirement, Rejected], ...]:
    """In order, each label requirement a node must meet for ``gpu`` and the refusal when it does not.
    Cached, bounded: the replicas of a workload share their requirements, and few distinct ones exist."""
    checks: list[tuple[Requirement, Rejected]] = []
    if gpu.min_memory_mib > 0:
        enough = Requirement(GPU_MEMORY_LABEL, Operator.GT, (str(gpu.min_memory_mib - 1),))
        checks += [(_MEMORY_KNOWN, GPU_MEMORY_UNKNOWN), (enough, too_little_memory(gpu))]
    if gpu.models:
        accepted = Requirement(GPU_PRODUCT_LABEL, Operator.IN, gpu.models)
        checks += [(_MODEL_KNOWN, GPU_MODEL_UNKNOWN), (accepted, model_not_accepted(gpu))]
    return tuple(checks)


def gpu_refusal(gpu: GpuRequirements | None, labels: Mapping[str, str]) -> Rejected | None:
    """The first check a node with ``labels`` fails (None: its GPUs qualify, or the pod asks nothing)."""
    if gpu is None:
        return None
    failed = (refused for requirement, refused in gpu_checks(gpu) if not requirement_matches(requirement, labels))
    return next(failed, None)


def accepted_gpu_models(constraints: PodConstraints) -> tuple[str, ...]:
    """The ``GPU_PRODUCT_LABEL`` values a pod's required rules leave it, sorted; () when they leave any model.

    Read from the GPU requirements' models, a node selector on the label, and a required node affinity
    whose every (ORed) term restricts the label with ``In``; where several say, the models all of them
    accept. Other forms (``NotIn``, a term that leaves the label free) leave any model: the fragmentation
    measure then counts the pod's shape on every node, as before it knew models.
    """
    accepted: set[str] | None = None

    def narrow(models: Iterable[str]) -> None:
        nonlocal accepted
        accepted = set(models) if accepted is None else accepted & set(models)

    if constraints.gpu is not None and constraints.gpu.models:
        narrow(constraints.gpu.models)
    selected = [value for key, value in constraints.node_selector if key == GPU_PRODUCT_LABEL]
    if selected:
        narrow(selected)
    terms = constraints.node_affinity.required if constraints.node_affinity is not None else None
    if terms:
        per_term = [_term_models(term) for term in terms]
        if all(models is not None for models in per_term):
            narrow(model for models in per_term if models is not None for model in models)
    return tuple(sorted(accepted)) if accepted else ()


def _term_models(term: NodeSelectorTerm) -> set[str] | None:
    """The models one term accepts (its ``In`` requirements on the label, ANDed); None: it leaves any."""
    models: set[str] | None = None
    for requirement in term.match_expressions:
        if requirement.key == GPU_PRODUCT_LABEL and requirement.operator is Operator.IN:
            models = set(requirement.values) if models is None else models & set(requirement.values)
    return models
