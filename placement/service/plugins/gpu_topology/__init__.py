from placement.service.plugins.gpu_topology.exact_plan import GpuTopology

__all__ = ["GpuTopology"]
