"""What kube-scheduler honours besides resources, ported from its plugins: node name, node selector and
affinity, taints and tolerations (a not-Ready node by its taints), unschedulable nodes, host ports,
inter-pod affinity and anti-affinity, topology spread, scheduling gates.

``model`` holds the vocabulary (the pod's constraints, a node's facts, a placed pod's facts), ``view`` the
read interface the vectorised plugins take from the cluster state.
"""
