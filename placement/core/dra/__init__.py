"""Dynamic Resource Allocation (DRA) as the placement service reads it: pure, no I/O.

``model`` holds the frozen vocabulary of a ResourceSlice, ``slices`` reads decoded objects into it,
``pools`` groups slices into pools and says which devices a node may use, ``gpus`` recognises NVIDIA
GPUs and MIG devices among them, ``join`` ties those devices to the agent's ``NodeTopology`` (or infers
what the driver's attributes imply when there is none), and ``footprints`` says which devices share
physical hardware so that an allocator never hands out the same silicon twice. ``cel`` evaluates the
DeviceClass and claim selectors (CEL with Kubernetes' quantity and semver extensions) on one device.
``claims`` reads DeviceClasses, ResourceClaims and templates, and ``pod_claims`` finds a pod's claims as
kube-scheduler does; ``search`` holds the allocator's (kube-scheduler 1.37's)
rules, which ``first_fit`` (kube-scheduler's answer) and ``best_fit`` (scored by GPU topology) apply;
``allocation`` writes the claim's ``status.allocation`` and ``reservedFor`` as kube-scheduler does;
``inferred`` describes a node known only from its slices (no agent report).
"""
