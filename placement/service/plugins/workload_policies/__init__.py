from placement.service.plugins.workload_policies.workload_rules import WorkloadPolicies

__all__ = ["WorkloadPolicies"]
