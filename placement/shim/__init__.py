"""The scheduler shim: a kube-scheduler HTTP extender and a standalone binder, both gRPC clients of the
placement service."""
