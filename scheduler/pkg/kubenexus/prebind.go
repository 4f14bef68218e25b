package kubenexus

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
)

// The annotations a placed pod carries (placement/core/annotations.py): where it sits, for the node's
// agent, for operators, and for the service to rebuild its reservation after a restart.
const (
	assignedCellsKey = "numa.scheduling.kubenexus.io/assigned-numa-nodes"
	assignedGPUsKey  = "numa.scheduling.kubenexus.io/assigned-gpus"
	reservedNodeKey  = "scheduling.kubenexus.io/reserved-node"
)

// PreBindPreFlight: PreBind has work only when Reserve kept a placement; the pod's own patch can run in
// parallel with other plugins' PreBind.
func (p *Plugin) PreBindPreFlight(_ context.Context, state fwk.CycleState, _ *v1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	if _, err := state.Read(reservedKey); err != nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{AllowParallel: true}, nil
}

// PreBind writes the service's placement before the pod binds: the devices it chose into each of the pod's
// ResourceClaims (writeClaim), then the pod's NUMA cells and GPUs and the annotations the service chose, in one
// merge patch (as the binder writes them). The profile disables DynamicResources: one writer of the claims.
func (p *Plugin) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	data, err := state.Read(reservedKey)
	if err != nil {
		return nil
	}
	placement := data.(*reserved).placement
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": placementAnnotations(placement.GetNumaCells(), placement.GetGpuIds(), placement.GetAnnotations(), nodeName)}})
	if err != nil {
		return fwk.AsStatus(err)
	}
	for _, claim := range placement.GetClaims() {
		if err := p.writeClaim(ctx, pod, claim); err != nil {
			return fwk.AsStatus(fmt.Errorf("%s: %w", Name, err))
		}
	}
	if _, err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: writing the placement on pod %s/%s: %w", Name, pod.Namespace, pod.Name, err))
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
