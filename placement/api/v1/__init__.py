"""The KubeNexus placement API v1, generated from proto/kubenexus/placement/v1/placement.proto."""
