"""Feeding the cluster index from Kubernetes watches."""
