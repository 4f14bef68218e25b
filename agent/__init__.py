"""KubeNexus topology agent: discovers a node's NUMA, memory, PCIe and GPU topology."""

__version__ = "0.1.0"
