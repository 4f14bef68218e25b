package kubenexus

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// The annotations a placed pod carries (placement/core/annotations.py): where it sits, for the node's
// agent, for operators, and for the service to rebuild its reservation after a restart.
const (
	assignedCellsKey = "numa.scheduling.kubenexus.io/assigned-numa-nodes"
	assignedGPUsKey  = "numa.scheduling.kubenexus.io/assigned-gpus"
	reservedNodeKey  = "scheduling.kubenexus.io/reserved-node"
)

func placed(state fwk.CycleState) *placementv1.PodPlacement {
	data, err := state.Read(reservedKey)
	if err != nil {
		return nil
	}
	return data.(*reserved).placement
}

// PreBindPreFlight: PreBind has work only when the service chose devices for the pod's ResourceClaims.
func (p *Plugin) PreBindPreFlight(_ context.Context, state fwk.CycleState, _ *v1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	if len(placed(state).GetClaims()) == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{AllowParallel: true}, nil
}

// PreBind writes the devices the service chose into each of the pod's ResourceClaims (writeClaim) before the
// pod binds. The profile disables DynamicResources: one writer of the claims.
func (p *Plugin) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	for _, claim := range placed(state).GetClaims() {
		if err := p.writeClaim(ctx, pod, claim); err != nil {
			return fwk.AsStatus(fmt.Errorf("%s: %w", Name, err))
		}
	}
	return nil
}

// Bind binds a pod the service placed, its placement with it: the Binding carries the pod's NUMA cells, GPUs
// and the annotations the service chose, which the API server merges into the pod as it sets the node
// (pkg/registry/core/pod/storage BindingREST.setPodNodeAndMetadata). One write per pod, as DefaultBinder's,
// and the pod never runs on its node without them. A pod the service did not place (Ignore) is
// DefaultBinder's: Skip.
func (p *Plugin) Bind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	placement := placed(state)
	if placement == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			Annotations: placementAnnotations(placement.GetNumaCells(), placement.GetGpuIds(), placement.GetAnnotations(), nodeName),
		},
		Target: v1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	if err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: binding pod %s/%s to %s with its placement: %w", Name, pod.Namespace, pod.Name, nodeName, err))
	}
	return nil
}

func placementAnnotations(cells, gpus []int32, chosen map[string]string, node string) map[string]string {
	annotations := map[string]string{assignedCellsKey: formatIDs(cells)}
	for key, value := range chosen {
		annotations[key] = value
	}
	annotations[reservedNodeKey] = node
	if len(gpus) > 0 {
		annotations[assignedGPUsKey] = formatIDs(gpus)
	}
	return annotations
}

// formatIDs: ascending, comma-separated (placement/core/annotations.py format_ids).
func formatIDs(ids []int32) string {
	sorted := append([]int32(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	texts := make([]string, len(sorted))
	for i, id := range sorted {
		texts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(texts, ",")
}
