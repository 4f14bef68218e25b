"""The API paths both programs read or write."""

NODES_PATH = "/api/v1/nodes"
PODS_PATH = "/api/v1/pods"

# What the placement service reads besides, for the constraints kube-scheduler honours: namespaces' labels
# (pod affinity's namespace selectors), priority classes (a pod's priorityClassName), and claims with their
# volumes and classes (a volume's node affinity, binding on first consumer).
NAMESPACES_PATH = "/api/v1/namespaces"
PRIORITY_CLASSES_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"
PERSISTENT_VOLUME_CLAIMS_PATH = "/api/v1/persistentvolumeclaims"
PERSISTENT_VOLUMES_PATH = "/api/v1/persistentvolumes"
STORAGE_CLASSES_PATH = "/apis/storage.k8s.io/v1/storageclasses"

# NodeResourceTopology: the agent writes one per node, the placement service watches them.
NRT_GROUP = "topology.node.k8s.io"
NRT_VERSION = "v1alpha2"
NRT_PLURAL = "noderesourcetopologies"
NRTS_PATH = f"/apis/{NRT_GROUP}/{NRT_VERSION}/{NRT_PLURAL}"

# Dynamic Resource Allocation: the group's discovery document says which versions are served; the service
# reads the first of DRA_VERSIONS that is (v1 is GA since Kubernetes 1.34).
DRA_GROUP = "resource.k8s.io"
DRA_GROUP_PATH = f"/apis/{DRA_GROUP}"
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")


def dra_path(version: str, plural: str) -> str:
    """``/apis/resource.k8s.io/<version>/<plural>``: every namespace's objects for a namespaced kind."""
    return f"{DRA_GROUP_PATH}/{version}/{plural}"
