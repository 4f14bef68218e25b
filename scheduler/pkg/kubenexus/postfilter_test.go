package kubenexus

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

func TestPostFilterCarriesOutTheServicesPlan(t *testing.T) {
	plan := &placementv1.PreemptResponse{
		Preempted: true,
		Victims: []*placementv1.Victim{
			{Pod: &placementv1.PodRef{Namespace: "ml", Name: "low-0"}, Node: "gpu-a"},
			{Pod: &placementv1.PodRef{Namespace: "ml", Name: "low-1"}, Node: "gpu-a"},
		},
		Nominations: []*placementv1.Nomination{{Pod: &placementv1.PodRef{Namespace: "ml", Name: "high"}, Node: "gpu-a"}},
	}
	tests := []struct {
		name        string
		plan        *placementv1.PreemptResponse
		refuse      map[string]error // eviction answers by victim name
		wantCode    fwk.Code
		wantNode    string
		wantMessage string
		wantEvicted []string
		wantEvents  int // Preempted events on the victims evicted now
	}{
		{name: "victims evicted, the node nominated", plan: plan, wantCode: fwk.Success, wantNode: "gpu-a", wantEvicted: []string{"low-0", "low-1"}, wantEvents: 2},
		{
			name: "a victim already gone counts as evicted", plan: plan,
			refuse:   map[string]error{"low-0": apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "low-0")},
			wantCode: fwk.Success, wantNode: "gpu-a", wantEvicted: []string{"low-0", "low-1"}, wantEvents: 1,
		},
		{
			name: "a budget refuses: the plan stops there", plan: plan,
			refuse:   map[string]error{"low-0": apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)},
			wantCode: fwk.Unschedulable, wantMessage: "a disruption budget refused it", wantEvicted: []string{"low-0"},
		},
		{
			name:     "no plan: the service's reason",
			plan:     &placementv1.PreemptResponse{Reason: "no lower-priority pods to evict"},
			wantCode: fwk.Unschedulable, wantMessage: "placement service: no preemption: no lower-priority pods to evict",
		},
		{
			name:     "room without evicting anyone: no nomination to block the node for others",
			plan:     &placementv1.PreemptResponse{Preempted: true, Nominations: plan.Nominations},
			wantCode: fwk.Unschedulable, wantMessage: "node gpu-a has room without evicting any pod",
		},
		{
			name:     "a plan for another pod nominates nothing here",
			plan:     &placementv1.PreemptResponse{Preempted: true, Nominations: []*placementv1.Nomination{{Pod: &placementv1.PodRef{Namespace: "ml", Name: "other"}, Node: "gpu-a"}}},
			wantCode: fwk.Unschedulable, wantMessage: "nominates no node",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := clientsetfake.NewClientset()
			var evicted []string
			client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				name := action.(k8stesting.CreateAction).GetObject().(interface{ GetName() string }).GetName()
				evicted = append(evicted, name)
				return true, nil, tt.refuse[name]
			})
			recorder := events.NewFakeRecorder(10)
			handle := permitFramework(t, serve(t, &fakeService{preempt: tt.plan}, FailurePolicyFail),
				frameworkruntime.WithClientSet(client), frameworkruntime.WithEventRecorder(recorder))
			runner := handle.(framework.Framework)
			pod := testPod("high")
			result, status := runner.RunPostFilterPlugins(context.Background(), framework.NewCycleState(), pod, nil)
			if status.Code() != tt.wantCode || !strings.Contains(status.Message(), tt.wantMessage) {
				t.Fatalf("got %v %q, want %v containing %q", status.Code(), status.Message(), tt.wantCode, tt.wantMessage)
			}
			var nominated *fwk.NominatingInfo
			if result != nil {
				nominated = result.NominatingInfo
			}
			if got := nominated.Mode(); (tt.wantNode != "") != (got == fwk.ModeOverride) {
				t.Errorf("nominating mode %v", got)
			}
			if tt.wantNode != "" && nominated.NominatedNodeName != tt.wantNode {
				t.Errorf("nominated %q, want %q", nominated.NominatedNodeName, tt.wantNode)
			}
			if strings.Join(evicted, ",") != strings.Join(tt.wantEvicted, ",") {
				t.Errorf("evicted %v, want %v", evicted, tt.wantEvicted)
			}
			if len(recorder.Events) != tt.wantEvents {
				t.Fatalf("%d events, want %d", len(recorder.Events), tt.wantEvents)
			}
			for range tt.wantEvents {
				if event := <-recorder.Events; !strings.HasPrefix(event, "Normal Preempted Preempted by pod uid-high on node gpu-a") {
					t.Errorf("event %q", event)
				}
			}
		})
	}
}

func TestPostFilterAsksRoomForAGangMembersWholeGroup(t *testing.T) {
	tests := []struct {
		name      string
		pod       *v1.Pod
		members   []*v1.Pod
		wantCalls int
		wantGroup []string // the members sent as the preemptor, this one first; nil: the pod alone
	}{
		{name: "a lone pod: itself", pod: testPod("high"), wantCalls: 1},
		{
			name:      "a member: its group's pending members",
			pod:       member("train-1", "train", "2", "", "kubenexus-scheduler"),
			members:   []*v1.Pod{member("train-0", "train", "2", "", "kubenexus-scheduler")},
			wantCalls: 1, wantGroup: []string{"train-1", "train-0"},
		},
		{name: "a member whose group is not all there: no call", pod: member("train-1", "train", "2", "", "kubenexus-scheduler")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			service := &fakeService{preempt: &placementv1.PreemptResponse{Reason: "no lower-priority pods to evict"}}
			handle, plugin := permitFrameworkAndPlugin(t, serve(t, service, FailurePolicyFail))
			plugin.pods = podIndexer(t, append([]*v1.Pod{tt.pod}, tt.members...)...)
			_, status := handle.(framework.Framework).RunPostFilterPlugins(context.Background(), framework.NewCycleState(), tt.pod, nil)
			if status.Code() != fwk.Unschedulable {
				t.Errorf("got %v, want Unschedulable", status)
			}
			if len(service.preempts) != tt.wantCalls {
				t.Fatalf("Preempt asked %d times, want %d", len(service.preempts), tt.wantCalls)
			}
			if tt.wantCalls == 0 {
				return
			}
			request := service.preempts[0]
			var sent []string
			for _, body := range request.GetGroup().GetMembersJson() {
				var pod v1.Pod
				if err := json.Unmarshal([]byte(body), &pod); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, pod.Name)
			}
			if strings.Join(sent, ",") != strings.Join(tt.wantGroup, ",") || (tt.wantGroup == nil) != (request.GetPodJson() != "") {
				t.Errorf("preemptor: group %v, pod alone %v", sent, request.GetPodJson() != "")
			}
		})
	}
}
