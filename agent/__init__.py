"""The KubeNexus topology agent: discovers a node's NUMA, memory, PCIe and GPU topology and publishes it."""
