"""The API paths both programs read or write."""

NODES_PATH = "/api/v1/nodes"
PODS_PATH = "/api/v1/pods"

# NodeResourceTopology: the agent writes one per node, the placement service watches them.
NRT_GROUP = "topology.node.k8s.io"
NRT_VERSION = "v1alpha2"
NRT_PLURAL = "noderesourcetopologies"
NRTS_PATH = f"/apis/{NRT_GROUP}/{NRT_VERSION}/{NRT_PLURAL}"
