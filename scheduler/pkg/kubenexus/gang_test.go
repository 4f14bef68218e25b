package kubenexus

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

func member(name, group, minAvailable, node, scheduler string) *v1.Pod {
	pod := testPod(name)
	pod.Labels = map[string]string{groupNameLabel: group}
	if minAvailable != "" {
		pod.Labels[minAvailableLabel] = minAvailable
	}
	pod.Spec.NodeName = node
	pod.Spec.SchedulerName = scheduler
	return pod
}

func podLister(t *testing.T, pods ...*v1.Pod) corelisters.PodLister {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, pod := range pods {
		if err := indexer.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewPodLister(indexer)
}

func TestPreFilterWaitsForTheGroupsMembers(t *testing.T) {
	service := &fakeService{}
	plugin, err := newWithClient(serve(t, service, FailurePolicyFail), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plugin.Close() }()
	pod := member("train-0", "train", "3", "", "kubenexus-scheduler")
	plugin.pods = podLister(t, pod, member("train-1", "train", "3", "", "kubenexus-scheduler"))
	_, status := plugin.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
	if status.Code() != fwk.UnschedulableAndUnresolvable || status.Message() != "pod group ml/train waits for its members: 2 of 3 present" {
		t.Errorf("got %v %q", status.Code(), status.Message())
	}
	if len(service.gangCalls) != 0 {
		t.Errorf("the service was asked to plan a group below its minimum")
	}
}

func TestPreFilterPlansTheWholeGroup(t *testing.T) {
	placed := &placementv1.PlaceGangResponse{State: placementv1.GangState_GANG_STATE_PLACED, Members: []*placementv1.MemberPlacement{
		{Pod: &placementv1.PodRef{Namespace: "ml", Name: "train-1"}, Placement: &placementv1.PodPlacement{Node: "gpu-b", Score: 80}},
		{Pod: &placementv1.PodRef{Namespace: "ml", Name: "train-0"}, Placement: &placementv1.PodPlacement{Node: "gpu-a", Score: 70, NumaCells: []int32{0}}},
	}}
	tests := []struct {
		name        string
		response    *placementv1.PlaceGangResponse
		wantCode    fwk.Code
		wantMessage string
		wantNode    string
	}{
		{name: "placed: the cycle narrows to the member's planned node", response: placed, wantCode: fwk.Success, wantNode: "gpu-a"},
		{
			name:     "waiting: the whole group waits with the reason",
			response: &placementv1.PlaceGangResponse{State: placementv1.GangState_GANG_STATE_WAITING, Reason: "cannot fit 3 member(s)"},
			wantCode: fwk.Unschedulable, wantMessage: "placement service: pod group ml/train waits: cannot fit 3 member(s)",
		},
		{
			name:     "infeasible: unresolvable",
			response: &placementv1.PlaceGangResponse{State: placementv1.GangState_GANG_STATE_INFEASIBLE, Reason: "no rack has room"},
			wantCode: fwk.UnschedulableAndUnresolvable, wantMessage: "pod group ml/train: no rack has room",
		},
		{
			name:     "placed without this member",
			response: &placementv1.PlaceGangResponse{State: placementv1.GangState_GANG_STATE_PLACED, Members: placed.Members[:1]},
			wantCode: fwk.Unschedulable, wantMessage: "placed without this member",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			service := &fakeService{placeGang: tt.response}
			plugin, err := newWithClient(serve(t, service, FailurePolicyFail), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = plugin.Close() }()
			pod := member("train-0", "train", "3", "", "kubenexus-scheduler")
			plugin.pods = podLister(t, pod,
				member("train-2", "train", "3", "", "kubenexus-scheduler"),
				member("train-1", "train", "3", "", "kubenexus-scheduler"),
				member("train-9", "train", "3", "gpu-c", "kubenexus-scheduler"), // bound already
				member("other-0", "other", "", "", "kubenexus-scheduler"),       // another group
				member("train-x", "train", "3", "", "default-scheduler"),        // another scheduler's
			)
			ctx := context.Background()
			state := framework.NewCycleState()
			result, status := plugin.PreFilter(ctx, state, pod, nil)
			if status.Code() != tt.wantCode || !strings.Contains(status.Message(), tt.wantMessage) {
				t.Fatalf("got %v %q, want %v containing %q", status.Code(), status.Message(), tt.wantCode, tt.wantMessage)
			}
			if len(service.gangCalls) != 1 {
				t.Fatalf("PlaceGang called %d times", len(service.gangCalls))
			}
			group := service.gangCalls[0].GetGroup()
			var names []string
			for _, body := range group.GetMembersJson() {
				var sent v1.Pod
				if err := json.Unmarshal([]byte(body), &sent); err != nil {
					t.Fatal(err)
				}
				names = append(names, sent.Name)
			}
			// train-9 is bound: the group needs 2 more beside it, of the 3 pending.
			if strings.Join(names, ",") != "train-0,train-1,train-2" || group.GetMinMember() != 2 || group.GetName() != "train" || group.GetNamespace() != "ml" {
				t.Errorf("asked for group %s/%s min %d members %v", group.GetNamespace(), group.GetName(), group.GetMinMember(), names)
			}
			if group.GetScheduleTimeoutSeconds() != 60 { // the plugin's permitTimeout: the service holds the plan as long
				t.Errorf("schedule timeout %d s, want the permit timeout, 60 s", group.GetScheduleTimeoutSeconds())
			}
			if tt.wantNode == "" {
				return
			}
			if !result.NodeNames.Has(tt.wantNode) || result.NodeNames.Len() != 1 {
				t.Errorf("PreFilterResult %v, want only %s", result.NodeNames, tt.wantNode)
			}
			if got := plugin.Reserve(ctx, state, pod, tt.wantNode); !got.IsSuccess() {
				t.Fatalf("Reserve: %v", got)
			}
			if service.reserves != 0 {
				t.Errorf("Reserve called the service %d times; the group's plan holds the member already", service.reserves)
			}
			data, err := state.Read(reservedKey)
			if err != nil || data.(*reserved).placement.GetNumaCells()[0] != 0 {
				t.Errorf("the member's placement is not kept for PreBind: %v", err)
			}
		})
	}
}
