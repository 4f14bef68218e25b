// Command scheduler is the kube-scheduler oracle: each case (Nodes, the Pods bound to them, Namespaces,
// PersistentVolumeClaims, PersistentVolumes, StorageClasses and the incoming Pod, as the API server serves
// them in JSON) is judged by kube-scheduler v1.37.2's default profile through its framework runtime, on a
// snapshot of the case's cluster, with informers over a fake clientset holding the same objects.
//
// The answer mirrors one scheduling cycle (pkg/scheduler/schedule_one.go): the PreEnqueue verdict, the
// PreFilter verdict, each node's Filter status (nodes outside a PreFilterResult get the status
// findNodesThatFitPod gives them), and for the feasible nodes PreScore and Score, per plugin normalised
// (before the weight) and the weighted total.
package main

import (
	"kubenexus.io/tests/oracles/internal/wire"
)

func main() { wire.Main(judge) }
