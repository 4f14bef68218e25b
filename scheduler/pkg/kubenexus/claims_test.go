package kubenexus

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

func allocation(devices ...string) *resourcev1.AllocationResult {
	result := &resourcev1.AllocationResult{}
	for _, device := range devices {
		result.Devices.Results = append(result.Devices.Results, resourcev1.DeviceRequestAllocationResult{
			Request: "gpus", Driver: "gpu.nvidia.com", Pool: "gpu-a", Device: device,
		})
	}
	return result
}

func TestPreBindWritesTheServicesDevicesIntoTheClaims(t *testing.T) {
	chosen := allocation("gpu-4", "gpu-5")
	text, err := json.Marshal(chosen)
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod("trainer")
	tests := []struct {
		name        string
		held        *resourcev1.AllocationResult
		reservedFor []resourcev1.ResourceClaimConsumerReference
		sent        string // allocation_json; "" for a claim allocated already
		wantError   string
		want        *resourcev1.AllocationResult
		wantFor     int
	}{
		{name: "unallocated: the service's devices, the finalizer, the pod", sent: string(text), want: chosen, wantFor: 1},
		{name: "allocated alike already (a shared claim): only reserved", held: chosen, sent: string(text), want: chosen, wantFor: 1},
		{name: "allocated already, nothing sent: only reserved", held: allocation("gpu-0"), want: allocation("gpu-0"), wantFor: 1},
		{
			name: "reserved for the pod already: untouched", held: chosen, sent: string(text), want: chosen, wantFor: 1,
			reservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}},
		},
		{name: "allocated meanwhile to other devices", held: allocation("gpu-0", "gpu-1"), sent: string(text), wantError: "allocated meanwhile, to other devices"},
		{name: "no longer allocated", wantError: "no longer allocated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claim := &resourcev1.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "four", Namespace: "ml"},
				Status:     resourcev1.ResourceClaimStatus{Allocation: tt.held, ReservedFor: tt.reservedFor},
			}
			client := clientsetfake.NewClientset(pod, claim)
			placement := &placementv1.PodPlacement{Node: "gpu-a", Claims: []*placementv1.ClaimAllocation{{Namespace: "ml", Name: "four", AllocationJson: tt.sent}}}
			service := &fakeService{reserve: &placementv1.ReserveResponse{Reserved: true, Placement: placement}}
			runner := permitFramework(t, serve(t, service, FailurePolicyFail), frameworkruntime.WithClientSet(client)).(framework.Framework)
			ctx := context.Background()
			state := framework.NewCycleState()
			if status := runner.RunReservePluginsReserve(ctx, state, pod, "gpu-a"); !status.IsSuccess() {
				t.Fatalf("Reserve: %v", status)
			}
			status := runner.RunPreBindPlugins(ctx, state, pod, "gpu-a")
			if tt.wantError != "" {
				if status.IsSuccess() || !strings.Contains(status.Message(), tt.wantError) {
					t.Fatalf("got %v, want an error containing %q", status, tt.wantError)
				}
				return
			}
			if !status.IsSuccess() {
				t.Fatalf("PreBind: %v", status)
			}
			stored, err := client.ResourceV1().ResourceClaims("ml").Get(ctx, "four", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := stored.Status.Allocation; got == nil || len(got.Devices.Results) != len(tt.want.Devices.Results) || got.Devices.Results[0].Device != tt.want.Devices.Results[0].Device {
				t.Errorf("allocation %+v, want %+v", got, tt.want)
			}
			if len(stored.Status.ReservedFor) != tt.wantFor || stored.Status.ReservedFor[0].UID != pod.UID {
				t.Errorf("reservedFor %+v", stored.Status.ReservedFor)
			}
			if tt.reservedFor == nil && !slices.Contains(stored.Finalizers, deleteProtection) {
				t.Errorf("finalizers %v", stored.Finalizers)
			}
			// A binding that does not complete takes the pod out again.
			runner.RunReservePluginsUnreserve(ctx, state, pod, "gpu-a")
			stored, err = client.ResourceV1().ResourceClaims("ml").Get(ctx, "four", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(stored.Status.ReservedFor) != 0 {
				t.Errorf("after Unreserve, reservedFor %+v", stored.Status.ReservedFor)
			}
		})
	}
}
