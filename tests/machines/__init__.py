"""The machines of the tests and benchmarks, in one catalogue.

Two views of a machine, one module each:

- ``gpu_hardware``: GPU machines as NVML and sysfs describe them (bus ids, NVLinks, fabric state), for
  the fake NVML module (``tests.fake_nvml``) and the fake sysfs tree (``tests.gpu_sysfs``) that the
  agent's discovery reads.
- ``node_topologies``: ``NodeTopology`` values, what the agent publishes and the placement service
  reads: real ``nvidia-smi topo -m`` captures with memory and kubelet settings added, and CPU nodes.

Import each from its module: the benchmarks load the topologies alone, without the hardware view's
NVML bindings, so that a benchmark measures the service and not its fixtures.
"""
