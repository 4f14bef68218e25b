from placement.service.plugins.node_resources.numa_admission import NodeResources

__all__ = ["NodeResources"]
