from placement.service.plugins.kube_constraints.constraint_plugins import KubeConstraints

__all__ = ["KubeConstraints"]
