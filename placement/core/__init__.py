"""Placement decisions over the cluster model: pure code, no I/O, no gRPC or Kubernetes."""
