package kubenexus

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

func placedOn(node string, gpus ...int32) *placementv1.PodPlacement {
	return &placementv1.PodPlacement{Node: node, NumaCells: []int32{0}, GpuIds: gpus}
}

func TestPermitHoldsAGroupUntilEnoughOfItIsScheduledHere(t *testing.T) {
	reserved := &placementv1.PermitStatusResponse{State: placementv1.PermitState_PERMIT_STATE_ALLOW, PodGroup: "ml/train", Ready: proto.Int32(3), MinMember: proto.Int32(3)}
	plan := []*placementv1.MemberPlacement{
		{Pod: &placementv1.PodRef{Namespace: "ml", Name: "train-0"}, Placement: placedOn("n1", 0, 1)},
		{Pod: &placementv1.PodRef{Namespace: "ml", Name: "train-1"}, Placement: placedOn("n1", 2, 3)},
		{Pod: &placementv1.PodRef{Namespace: "ml", Name: "train-2"}, Placement: placedOn("n2", 0, 1)},
	}
	tests := []struct {
		name       string
		bound      bool                      // train-2 is bound already: only two more are needed here
		replanned  *placementv1.PodPlacement // the group's latest plan for train-0, after it started waiting
		wantFirst  fwk.Code                  // train-0, waiting since the first Permit
		wantSecond fwk.Code                  // train-1's own Permit
		wantReason string
	}{
		{name: "two of three past Reserve: both wait", wantFirst: fwk.Wait, wantSecond: fwk.Wait},
		{name: "the third is bound already: the second allows the first", bound: true, wantFirst: fwk.Success, wantSecond: fwk.Success},
		{
			name: "planned again elsewhere while waiting: the group is rejected whole", bound: true, replanned: placedOn("n2", 4, 5),
			wantFirst: fwk.Unschedulable, wantSecond: fwk.Unschedulable, wantReason: "planned again while train-0 waited",
		},
		{name: "planned again the same: allowed", bound: true, replanned: placedOn("n1", 0, 1), wantFirst: fwk.Success, wantSecond: fwk.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			service := &fakeService{permit: map[string]*placementv1.PermitStatusResponse{"train-0": reserved, "train-1": reserved}}
			handle, plugin := permitFrameworkAndPlugin(t, serve(t, service, FailurePolicyFail))
			runner := handle.(framework.Framework)
			ctx := context.Background()
			node := ""
			if tt.bound {
				node = "n2"
			}
			first, second := member("train-0", "train", "3", "", ""), member("train-1", "train", "3", "", "")
			plugin.pods = podIndexer(t, first, second, member("train-2", "train", "3", node, ""))
			plugin.planned(first, plan)
			for _, pod := range []*v1.Pod{first, second} {
				state := framework.NewCycleState()
				state.Write(stateKey, &cycleState{gang: plan[podIndex(pod)].GetPlacement()})
				if status := runner.RunReservePluginsReserve(ctx, state, pod, "n1"); !status.IsSuccess() {
					t.Fatalf("Reserve %s: %v", pod.Name, status)
				}
				if pod == first {
					waits, status := runner.RunPermitPlugins(ctx, state, first, "n1")
					if !status.IsWait() {
						t.Fatalf("first member: got %v, want Wait", status)
					}
					runner.AddWaitingPod(first, waits) // as schedule_one.go does after a Wait
					if tt.replanned != nil {
						plugin.planned(second, []*placementv1.MemberPlacement{{Pod: plan[0].GetPod(), Placement: tt.replanned}})
					}
					continue
				}
				_, status := runner.RunPermitPlugins(ctx, state, second, "n1")
				if status.Code() != tt.wantSecond || !strings.Contains(status.Message(), tt.wantReason) {
					t.Errorf("second member: got %v %q, want %v containing %q", status.Code(), status.Message(), tt.wantSecond, tt.wantReason)
				}
			}
			if plugin.mu.Lock(); tt.wantSecond == fwk.Success && len(plugin.gangs) != 0 {
				t.Errorf("the complete group's book is kept: %v", plugin.gangs)
			}
			plugin.mu.Unlock()
			if tt.wantFirst == fwk.Wait {
				if handle.GetWaitingPod(first.UID) == nil {
					t.Error("the first member is no longer waiting")
				}
				return
			}
			expectPermitEnds(t, runner, first, tt.wantFirst, tt.wantReason)
		})
	}
}

func podIndex(pod *v1.Pod) int {
	return int(pod.Name[len(pod.Name)-1] - '0')
}

func TestUnreserveTakesTheMemberOutOfItsGroupsBook(t *testing.T) {
	plugin, err := newWithClient(serve(t, &fakeService{}, FailurePolicyFail), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plugin.Close() }()
	pod := member("train-0", "train", "2", "", "")
	plugin.hold(pod, placedOn("n1", 0))
	plugin.Unreserve(context.Background(), framework.NewCycleState(), pod, "n1")
	if len(plugin.gangs) != 0 {
		t.Errorf("books left after the only member was unreserved: %v", plugin.gangs)
	}
}

func TestPermitReadsAReleaseNoticeOlderThanThisCyclesPlanAndAsksAgain(t *testing.T) {
	notice := &placementv1.PermitStatusResponse{State: placementv1.PermitState_PERMIT_STATE_REJECT, PodGroup: "ml/train", Reason: "the scheduler gave up on member ml/train-1"}
	reserved := &placementv1.PermitStatusResponse{State: placementv1.PermitState_PERMIT_STATE_ALLOW, PodGroup: "ml/train", MinMember: proto.Int32(1)}
	tests := []struct {
		name    string
		planned bool // this cycle's PreFilter planned the group (PlaceGang)
		answers []*placementv1.PermitStatusResponse
		want    fwk.Code
		calls   int
	}{
		{name: "planned this cycle: the notice is read, the second answer counts", planned: true, answers: []*placementv1.PermitStatusResponse{notice, reserved}, want: fwk.Success, calls: 2},
		{name: "planned this cycle, rejected again: the rejection stands", planned: true, answers: []*placementv1.PermitStatusResponse{notice, notice}, want: fwk.Unschedulable, calls: 2},
		{name: "not planned this cycle: the notice is the answer", answers: []*placementv1.PermitStatusResponse{notice, reserved}, want: fwk.Unschedulable, calls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			service := &fakeService{permitted: map[string][]*placementv1.PermitStatusResponse{"train-0": tt.answers}}
			handle := permitFramework(t, serve(t, service, FailurePolicyFail))
			state := framework.NewCycleState()
			if tt.planned {
				state.Write(stateKey, &cycleState{gang: placedOn("n1", 0)})
			}
			pod := member("train-0", "train", "1", "", "")
			_, status := handle.(framework.Framework).RunPermitPlugins(context.Background(), state, pod, "n1")
			if status.Code() != tt.want {
				t.Errorf("got %v, want %v", status, tt.want)
			}
			if left := len(service.permitted["train-0"]); len(tt.answers)-left != tt.calls {
				t.Errorf("PermitStatus asked %d times, want %d", len(tt.answers)-left, tt.calls)
			}
		})
	}
}

func TestPermitCountsAKueueGroupByItsLabel(t *testing.T) {
	plugin := &Plugin{groups: map[types.UID]string{}, gangs: map[string]*gangBook{}}
	pod := kueueMember("train-0", "train", "4", "")
	plugin.pods = podIndexer(t, pod,
		kueueMember("train-1", "train", "4", "n1"),                  // bound
		kueueMember("train-2", "train", "4", ""),                    // pending
		member("ours-0", "train", "3", "n1", "kubenexus-scheduler"), // our group of the same label value, bound
	)
	key := gangKey(pod)
	if key != "ml/kueue_train" {
		t.Fatalf("gangKey %q, want ml/kueue_train", key)
	}
	// The service gives no minimum: the total-count annotation's; train-0 and the bound train-1 are counted.
	if present, needed := plugin.pastReserve(pod, key, 0); present != 2 || needed != 4 {
		t.Errorf("got %d of %d, want 2 of 4", present, needed)
	}
}
