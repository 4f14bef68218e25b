package kubenexus

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

func init() {
	metrics.Register() // the framework runtime records its extension points' durations
}

func testPod(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "main"}}},
	}
}

func nodeInfo(name string) fwk.NodeInfo {
	return tf.BuildNodeInfos([]*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: name}}})[0]
}

func TestPreFilterFilterScore(t *testing.T) {
	scored := &placementv1.ScoreResponse{
		Nodes:  []string{"gpu-a", "gpu-b"},
		Scores: []float64{91.6, 40.2},
		Rejected: []*placementv1.Rejections{
			{Reason: "node(s) had untolerated taint(s)", Kind: placementv1.RejectionKind_REJECTION_KIND_NODE_CONSTRAINT, Nodes: []string{"gpu-c"}},
			{Reason: "Insufficient nvidia.com/gpu", Kind: placementv1.RejectionKind_REJECTION_KIND_INSUFFICIENT_RESOURCES, Nodes: []string{"gpu-d"}},
		},
	}
	noneFits := &placementv1.ScoreResponse{Rejected: []*placementv1.Rejections{
		{Reason: "node(s) didn't match Pod's node affinity/selector", Kind: placementv1.RejectionKind_REJECTION_KIND_NODE_CONSTRAINT, Nodes: []string{"a", "b"}},
		{Reason: "Insufficient nvidia.com/gpu", Kind: placementv1.RejectionKind_REJECTION_KIND_INSUFFICIENT_RESOURCES, Nodes: []string{"c"}},
	}}
	tests := []struct {
		name          string
		score         *placementv1.ScoreResponse
		err           error
		policy        string
		wantPreFilter fwk.Code
		wantMessage   string
		wantNodes     sets.Set[string]
		wantFilter    map[string]fwk.Code
		wantScore     map[string]int64
	}{
		{
			name: "feasible nodes narrow the cycle, scores rounded", score: scored, policy: FailurePolicyFail,
			wantPreFilter: fwk.Success, wantNodes: sets.New("gpu-a", "gpu-b"),
			wantFilter: map[string]fwk.Code{
				"gpu-a": fwk.Success, "gpu-c": fwk.UnschedulableAndUnresolvable, "gpu-d": fwk.Unschedulable,
				"other": fwk.UnschedulableAndUnresolvable,
			},
			wantScore: map[string]int64{"gpu-a": 92, "gpu-b": 40, "gpu-c": 0},
		},
		{
			name: "no feasible node: the service's reasons, counted; resolvable", score: noneFits, policy: FailurePolicyFail,
			wantPreFilter: fwk.Unschedulable,
			wantMessage:   "placement service: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector",
		},
		{
			name: "service down, fail closed", err: status.Error(codes.Unavailable, "connection refused"), policy: FailurePolicyFail,
			wantPreFilter: fwk.Error, wantMessage: "placement service Score: Unavailable: connection refused",
		},
		{
			name: "service down, Ignore: the other plugins decide", err: status.Error(codes.Unavailable, "down"), policy: FailurePolicyIgnore,
			wantPreFilter: fwk.Skip, wantScore: map[string]int64{"gpu-a": 0},
		},
		{
			name: "a refused pod is unschedulable whatever the policy", err: status.Error(codes.InvalidArgument, "bad annotation"),
			policy: FailurePolicyIgnore, wantPreFilter: fwk.UnschedulableAndUnresolvable,
			wantMessage: "refused by the placement service: Score: bad annotation",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			service := &fakeService{score: tt.score, err: tt.err}
			plugin, err := newWithClient(serve(t, service, tt.policy), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = plugin.Close() }()
			state := framework.NewCycleState()
			pod := testPod("train-0")
			result, prefilter := plugin.PreFilter(ctx, state, pod, nil)
			if prefilter.Code() != tt.wantPreFilter {
				t.Fatalf("PreFilter: got %v (%s), want %v", prefilter.Code(), prefilter.Message(), tt.wantPreFilter)
			}
			if tt.wantMessage != "" && prefilter.Message() != tt.wantMessage {
				t.Errorf("PreFilter message: got %q, want %q", prefilter.Message(), tt.wantMessage)
			}
			if tt.wantNodes != nil && (result == nil || !result.NodeNames.Equal(tt.wantNodes)) {
				t.Errorf("PreFilterResult: got %v, want %v", result, tt.wantNodes)
			}
			for node, want := range tt.wantFilter {
				if got := plugin.Filter(ctx, state, pod, nodeInfo(node)); got.Code() != want {
					t.Errorf("Filter(%s): got %v (%s), want %v", node, got.Code(), got.Message(), want)
				}
			}
			for node, want := range tt.wantScore {
				got, status := plugin.Score(ctx, state, pod, nodeInfo(node))
				if !status.IsSuccess() || got != want {
					t.Errorf("Score(%s): got %d %v, want %d", node, got, status, want)
				}
			}
			if len(service.scoreCalls) != 1 {
				t.Fatalf("the service was asked %d times in one cycle, want once", len(service.scoreCalls))
			}
			var sent v1.Pod
			if err := json.Unmarshal([]byte(service.scoreCalls[0].GetPodJson()), &sent); err != nil || sent.Name != pod.Name {
				t.Errorf("the pod travels as its JSON: got %q (%v)", service.scoreCalls[0].GetPodJson(), err)
			}
		})
	}
}

func TestReserve(t *testing.T) {
	tests := []struct {
		name     string
		response *placementv1.ReserveResponse
		err      error
		policy   string
		want     fwk.Code
		message  string
	}{
		{name: "reserved", response: &placementv1.ReserveResponse{Reserved: true, Placement: &placementv1.PodPlacement{Node: "n", NumaCells: []int32{1}}}, policy: FailurePolicyFail, want: fwk.Success},
		{
			name:     "refused: the reason",
			response: &placementv1.ReserveResponse{Rejected: []*placementv1.Rejections{{Reason: "Insufficient cpu", Nodes: []string{"n"}}}},
			policy:   FailurePolicyFail, want: fwk.Unschedulable, message: "placement service refused node n: Insufficient cpu",
		},
		{name: "service down, fail closed", err: status.Error(codes.DeadlineExceeded, "slow"), policy: FailurePolicyFail, want: fwk.Error},
		{name: "service down, Ignore", err: status.Error(codes.Unavailable, "down"), policy: FailurePolicyIgnore, want: fwk.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plugin, err := newWithClient(serve(t, &fakeService{reserve: tt.response, err: tt.err}, tt.policy), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = plugin.Close() }()
			state := framework.NewCycleState()
			got := plugin.Reserve(context.Background(), state, testPod("p"), "n")
			if got.Code() != tt.want || (tt.message != "" && got.Message() != tt.message) {
				t.Fatalf("got %v %q, want %v %q", got.Code(), got.Message(), tt.want, tt.message)
			}
			_, readErr := state.Read(reservedKey)
			if (readErr == nil) != (tt.want == fwk.Success && tt.err == nil) {
				t.Errorf("placement kept in the cycle state: %v", readErr == nil)
			}
		})
	}
}

// permitFramework is a real scheduler framework with the plugin at Reserve and Permit, so that waiting pods
// are the framework's own.
func permitFramework(t *testing.T, args *Args, options ...frameworkruntime.Option) fwk.Handle {
	t.Helper()
	handle, _ := permitFrameworkAndPlugin(t, args, options...)
	return handle
}

// permitFrameworkAndPlugin is permitFramework, with the plugin instance the framework made.
func permitFrameworkAndPlugin(t *testing.T, args *Args, options ...frameworkruntime.Option) (fwk.Handle, *Plugin) {
	t.Helper()
	var made *Plugin
	factory := func(ctx context.Context, _ runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
		plugin, err := newWithClient(args, handle)
		made = plugin
		return plugin, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	handle, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		// The plugin's Bind before DefaultBinder, as the shipped profile orders them.
		tf.RegisterPluginAsExtensions(Name, factory, "Reserve", "Permit", "PreBind", "Bind", "PostFilter"),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
	}, "kubenexus-scheduler", append(options, frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()))...)
	if err != nil {
		t.Fatal(err)
	}
	return handle, made
}

// expectPermitEnds waits (at most 30s) for a pod waiting at Permit to be allowed or rejected, and checks how.
func expectPermitEnds(t *testing.T, runner framework.Framework, pod *v1.Pod, want fwk.Code, reason string) {
	t.Helper()
	done := make(chan *fwk.Status, 1)
	go func() { done <- runner.WaitOnPermit(context.Background(), pod) }()
	select {
	case got := <-done:
		if got.Code() != want || !strings.Contains(got.Message(), reason) {
			t.Errorf("%s: got %v %q, want %v containing %q", pod.Name, got.Code(), got.Message(), want, reason)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s is still waiting at Permit", pod.Name)
	}
}

func TestPermitGangBarrier(t *testing.T) {
	waiting := &placementv1.PermitStatusResponse{State: placementv1.PermitState_PERMIT_STATE_WAIT, PodGroup: "ml/train", Ready: proto.Int32(1), MinMember: proto.Int32(2)}
	tests := []struct {
		name       string
		last       *placementv1.PermitStatusResponse
		unreserve  bool // the last member waits too, is rejected (a timeout) and unreserved, as schedule_one does
		wantFirst  fwk.Code
		wantReason string
	}{
		{name: "the group completes: every waiting member is allowed", last: &placementv1.PermitStatusResponse{State: placementv1.PermitState_PERMIT_STATE_ALLOW, PodGroup: "ml/train"}, wantFirst: fwk.Success},
		{
			name:      "the service gives the group up: every waiting member is rejected",
			last:      &placementv1.PermitStatusResponse{State: placementv1.PermitState_PERMIT_STATE_REJECT, PodGroup: "ml/train", Reason: "pod group ml/train timed out"},
			wantFirst: fwk.Unschedulable, wantReason: "pod group ml/train timed out",
		},
		{name: "a waiting member rejected: the others are rejected too", last: waiting, unreserve: true, wantFirst: fwk.Unschedulable, wantReason: "was unreserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			service := &fakeService{permit: map[string]*placementv1.PermitStatusResponse{"train-0": waiting, "train-1": tt.last}}
			handle := permitFramework(t, serve(t, service, FailurePolicyFail))
			runner := handle.(framework.Framework)
			ctx := context.Background()
			first, last := member("train-0", "train", "2", "", ""), member("train-1", "train", "2", "", "")
			waits, status := runner.RunPermitPlugins(ctx, framework.NewCycleState(), first, "n1")
			if !status.IsWait() {
				t.Fatalf("first member: got %v, want Wait", status)
			}
			runner.AddWaitingPod(first, waits) // as schedule_one.go does after a Wait
			waits, status = runner.RunPermitPlugins(ctx, framework.NewCycleState(), last, "n2")
			if tt.unreserve {
				runner.AddWaitingPod(last, waits)
				if !handle.RejectWaitingPod(last.UID) {
					t.Fatal("the last member was not waiting")
				}
				if got := runner.WaitOnPermit(ctx, last); got.IsSuccess() {
					t.Fatal("the rejected member was allowed")
				}
				runner.RunReservePluginsUnreserve(ctx, framework.NewCycleState(), last, "n2")
			}
			expectPermitEnds(t, runner, first, tt.wantFirst, tt.wantReason)
		})
	}
}

func TestPermitPassesAPodOutsideAnyGroupWithoutACall(t *testing.T) {
	service := &fakeService{} // PermitStatus would answer NotFound: a call would fail the pod
	handle := permitFramework(t, serve(t, service, FailurePolicyFail))
	_, status := handle.(framework.Framework).RunPermitPlugins(context.Background(), framework.NewCycleState(), testPod("lone"), "n1")
	if !status.IsSuccess() {
		t.Errorf("got %v", status)
	}
}

func TestBindCarriesThePlacement(t *testing.T) {
	placement := &placementv1.PodPlacement{
		Node: "gpu-a", NumaCells: []int32{1, 0}, GpuIds: []int32{5, 4},
		Annotations: map[string]string{"numa.scheduling.kubenexus.io/policy": "single-numa"},
	}
	tests := []struct {
		name     string
		response *placementv1.ReserveResponse
		want     map[string]string // the Binding's annotations
	}{
		{
			name:     "cells, GPUs, the chosen annotations and the node",
			response: &placementv1.ReserveResponse{Reserved: true, Placement: placement},
			want: map[string]string{
				assignedCellsKey: "0,1", assignedGPUsKey: "4,5", reservedNodeKey: "gpu-a",
				"numa.scheduling.kubenexus.io/policy": "single-numa",
			},
		},
		{
			name:     "a CPU pod: no GPU annotation",
			response: &placementv1.ReserveResponse{Reserved: true, Placement: &placementv1.PodPlacement{Node: "gpu-a", NumaCells: []int32{0}}},
			want:     map[string]string{assignedCellsKey: "0", reservedNodeKey: "gpu-a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod("infer-0")
			client := clientsetfake.NewClientset(pod)
			var bindings []*v1.Binding
			client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.GetSubresource() != "binding" {
					return false, nil, nil
				}
				bindings = append(bindings, action.(k8stesting.CreateAction).GetObject().(*v1.Binding))
				return true, nil, nil
			})
			handle := permitFramework(t, serve(t, &fakeService{reserve: tt.response}, FailurePolicyFail), frameworkruntime.WithClientSet(client))
			runner := handle.(framework.Framework)
			ctx := context.Background()
			state := framework.NewCycleState()
			if status := runner.RunReservePluginsReserve(ctx, state, pod, "gpu-a"); !status.IsSuccess() {
				t.Fatalf("Reserve: %v", status)
			}
			if status := runner.RunPreBindPreFlights(ctx, state, pod, "gpu-a"); !status.IsSkip() {
				t.Errorf("PreBindPreFlight without claims: %v, want Skip", status)
			}
			if status := runner.RunBindPlugins(ctx, state, pod, "gpu-a"); !status.IsSuccess() {
				t.Fatalf("Bind: %v", status)
			}
			if len(bindings) != 1 {
				t.Fatalf("%d bindings, want one (the plugin's, not DefaultBinder's too)", len(bindings))
			}
			if got := bindings[0]; got.Target.Name != "gpu-a" || got.UID != pod.UID || !maps.Equal(got.Annotations, tt.want) {
				t.Errorf("binding to %q uid %q with %v, want gpu-a %q with %v", got.Target.Name, got.UID, got.Annotations, pod.UID, tt.want)
			}
		})
	}
}

func TestBindLeavesAPodTheServiceDidNotPlaceToDefaultBinder(t *testing.T) {
	plugin, err := newWithClient(serve(t, &fakeService{}, FailurePolicyFail), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plugin.Close() }()
	if status := plugin.Bind(context.Background(), framework.NewCycleState(), testPod("p"), "n"); !status.IsSkip() {
		t.Errorf("got %v, want Skip", status)
	}
}

func TestPreBindSkippedWithoutReservation(t *testing.T) {
	plugin, err := newWithClient(serve(t, &fakeService{}, FailurePolicyFail), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plugin.Close() }()
	if _, status := plugin.PreBindPreFlight(context.Background(), framework.NewCycleState(), testPod("p"), "n"); !status.IsSkip() {
		t.Errorf("got %v, want Skip", status)
	}
}
