"""KubeNexus placement service: topology- and gang-aware decisions for the Kubernetes scheduler."""
