// Command dra is the DRA structured allocator's oracle: k8s.io/dynamic-resource-allocation's
// structured.NewAllocator (the implementation it picks for the case's features, with its CEL cache) and
// Allocate for one node, as kube-scheduler's DynamicResources Filter calls them.
//
// A case (one JSON line):
//
//	{"features": {"AdminAccess": true, ...},   // structured.Features by field name; absent: 1.37's defaults
//	 "allocators": ["stable"],                 // optional: only these implementations may be picked
//	 "node": {Node}, "slices": [ResourceSlice], "classes": [DeviceClass],
//	 "claims": [ResourceClaim],                // to allocate, in the pod's order (resource.k8s.io/v1)
//	 "allocated": [ResourceClaim],             // the cluster's claims with status.allocation (allocated state)
//	 "stored": false}                          // true: skip the API server's validation (objects.go: admit)
//
// The objects get the API server's v1 defaults and validation first; an object it would refuse is
// refused (answered with {"error": ...}).
//
// The answer: {"allocator": "incubating", "outcome": "allocated" | "unsatisfiable" | "error",
// "error": text, "nodeOnly": true when the error only concerns this node (ErrFailedAllocationOnNode),
// "results": [AllocationResult per claim]}.
package main

import (
	"kubenexus.io/tests/oracles/internal/wire"
)

func main() { wire.Main(func(line []byte) (any, error) { return judge(line) }) }
