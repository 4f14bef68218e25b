package kubenexus

import (
	"context"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
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

// kueueMember is a pod of a Kueue pod group; totalCount "" leaves the annotation out.
func kueueMember(name, group, totalCount, node string) *v1.Pod {
	pod := testPod(name)
	pod.Labels = map[string]string{kueueGroupLabel: group}
	if totalCount != "" {
		pod.Annotations = map[string]string{kueueTotalCountAnnotation: totalCount}
	}
	pod.Spec.NodeName = node
	pod.Spec.SchedulerName = "kubenexus-scheduler"
	return pod
}

// podIndexer is kube-scheduler's pod informer as the plugin sees it: holding pods, indexed by pod group.
func podIndexer(t *testing.T, pods ...*v1.Pod) cache.Indexer {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		podGroupIndex:        groupIndexKeys,
	})
	for _, pod := range pods {
		if err := indexer.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	return indexer
}

func TestPreFilterWaitsForTheGroupsMembers(t *testing.T) {
	service := &fakeService{}
	plugin, err := newWithClient(serve(t, service, FailurePolicyFail), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plugin.Close() }()
	pod := member("train-0", "train", "3", "", "kubenexus-scheduler")
	plugin.pods = podIndexer(t, pod, member("train-1", "train", "3", "", "kubenexus-scheduler"))
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
			plugin.pods = podIndexer(t, pod,
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
			names := sentNames(t, group)
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

func TestGroupOf(t *testing.T) {
	both := member("train-0", "train", "3", "", "")
	both.Labels[kueueGroupLabel] = "train"
	byAnnotation := kueueMember("lws-0", "lws", "4", "")
	delete(byAnnotation.Labels, kueueGroupLabel)
	byAnnotation.Annotations[kueueGroupLabel] = "lws"
	both2 := kueueMember("p", "from-label", "4", "")
	both2.Annotations[kueueGroupLabel] = "from-annotation"
	tests := []struct {
		name        string
		pod         *v1.Pod
		want        *groupRef // nil: a lone pod
		wantRefusal string
	}{
		{name: "a lone pod", pod: testPod("web-0")},
		{
			name: "our labels: the label value, its minimum", pod: member("train-0", "train", "3", "", ""),
			want: &groupRef{name: "train", labelKey: groupNameLabel, labelValue: "train", minimum: 3},
		},
		{
			name: "our labels without a minimum: 0", pod: member("train-0", "train", "", "", ""),
			want: &groupRef{name: "train", labelKey: groupNameLabel, labelValue: "train"},
		},
		{
			name: "Kueue: prefixed name, minimum from the total count", pod: kueueMember("train-0", "train", "4", ""),
			want: &groupRef{name: "kueue_train", labelKey: kueueGroupLabel, labelValue: "train", minimum: 4},
		},
		{
			name: "Kueue: a name that fits a label value exactly", pod: kueueMember("p", strings.Repeat("a", 57), "2", ""),
			want: &groupRef{name: "kueue_" + strings.Repeat("a", 57), labelKey: kueueGroupLabel, labelValue: strings.Repeat("a", 57), minimum: 2},
		},
		{
			name: "Kueue: a longer name ends with a digest", pod: kueueMember("p", strings.Repeat("a", 58), "2", ""),
			want: &groupRef{name: "kueue_" + strings.Repeat("a", 46) + "_4c0447f4e5", labelKey: kueueGroupLabel, labelValue: strings.Repeat("a", 58), minimum: 2},
		},
		{
			name: "Kueue: the head's trailing separators are stripped", pod: kueueMember("p", strings.Repeat("a", 44)+".-"+strings.Repeat("b", 17), "2", ""),
			want: &groupRef{name: "kueue_" + strings.Repeat("a", 44) + "_a051b09b4d", labelKey: kueueGroupLabel, labelValue: strings.Repeat("a", 44) + ".-" + strings.Repeat("b", 17), minimum: 2},
		},
		{
			name: "Kueue without the total count: 0", pod: kueueMember("train-0", "train", "", ""),
			want: &groupRef{name: "kueue_train", labelKey: kueueGroupLabel, labelValue: "train"},
		},
		{
			name: "Kueue with a total count of 0: 0", pod: kueueMember("train-0", "train", "0", ""),
			want: &groupRef{name: "kueue_train", labelKey: kueueGroupLabel, labelValue: "train"},
		},
		{
			name: "Kueue with a total count not an integer: 0", pod: kueueMember("train-0", "train", "four", ""),
			want: &groupRef{name: "kueue_train", labelKey: kueueGroupLabel, labelValue: "train"},
		},
		{
			name: "Kueue: the name as an annotation, as Kueue writes it", pod: byAnnotation,
			want: &groupRef{name: "kueue_lws", labelKey: kueueGroupLabel, labelValue: "lws", minimum: 4},
		},
		{
			name: "Kueue: the annotation wins over the label", pod: both2,
			want: &groupRef{name: "kueue_from-annotation", labelKey: kueueGroupLabel, labelValue: "from-annotation", minimum: 4},
		},
		{
			name: "both groups: refused", pod: both,
			wantRefusal: "pod ml/train-0 joins more than one pod group (label pod-group.scheduling.kubenexus.io/name=train and Kueue's kueue.x-k8s.io/pod-group-name=train); accepted: one group per pod",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := groupOf(tt.pod)
			if tt.wantRefusal != "" {
				if err == nil || err.Error() != tt.wantRefusal {
					t.Fatalf("got %v, want the refusal %q", err, tt.wantRefusal)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if got != nil && len(validation.IsValidLabelValue(got.name)) != 0 {
				t.Errorf("the service's name %q is not a label value", got.name)
			}
		})
	}
}

func TestPreFilterRefusesAPodOfTwoGroups(t *testing.T) {
	service := &fakeService{}
	plugin, err := newWithClient(serve(t, service, FailurePolicyFail), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plugin.Close() }()
	pod := member("train-0", "train", "1", "", "kubenexus-scheduler")
	pod.Labels[kueueGroupLabel] = "other"
	plugin.pods = podIndexer(t, pod)
	_, status := plugin.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
	if status.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(status.Message(), "joins more than one pod group") {
		t.Errorf("got %v %q", status.Code(), status.Message())
	}
	if len(service.gangCalls) != 0 || len(service.scoreCalls) != 0 {
		t.Errorf("the service was asked about a pod of two groups")
	}
}

func TestPreFilterPlansAKueueGroupWhole(t *testing.T) {
	service := &fakeService{placeGang: &placementv1.PlaceGangResponse{State: placementv1.GangState_GANG_STATE_WAITING, Reason: "cannot fit 3 member(s)"}}
	plugin, err := newWithClient(serve(t, service, FailurePolicyFail), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plugin.Close() }()
	pod := kueueMember("train-0", "train", "4", "")
	byAnnotation := kueueMember("train-2", "", "4", "") // named by Kueue's annotation only, as Kueue writes it
	delete(byAnnotation.Labels, kueueGroupLabel)
	byAnnotation.Annotations[kueueGroupLabel] = "train"
	plugin.pods = podIndexer(t, pod,
		byAnnotation,
		kueueMember("train-1", "train", "4", ""),
		kueueMember("train-9", "train", "4", "gpu-c"),             // bound already
		kueueMember("other-0", "other", "1", ""),                  // another Kueue group
		member("ours-0", "train", "3", "", "kubenexus-scheduler"), // our group of the same label value
	)
	_, status := plugin.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
	if status.Code() != fwk.Unschedulable || status.Message() != "placement service: pod group ml/kueue_train waits: cannot fit 3 member(s)" {
		t.Errorf("got %v %q", status.Code(), status.Message())
	}
	if len(service.gangCalls) != 1 {
		t.Fatalf("PlaceGang called %d times", len(service.gangCalls))
	}
	group := service.gangCalls[0].GetGroup()
	names := sentNames(t, group)
	// train-9 is bound: the group of 4 needs 3 more beside it.
	if strings.Join(names, ",") != "train-0,train-1,train-2" || group.GetMinMember() != 3 || group.GetName() != "kueue_train" || group.GetNamespace() != "ml" {
		t.Errorf("asked for group %s/%s min %d members %v", group.GetNamespace(), group.GetName(), group.GetMinMember(), names)
	}
}

// sentNames are the names of the members a PlaceGang request carried, in its order.
func sentNames(t *testing.T, group *placementv1.PodGroup) []string {
	t.Helper()
	var names []string
	for _, body := range group.GetMembersJson() {
		var sent v1.Pod
		if err := json.Unmarshal([]byte(body), &sent); err != nil {
			t.Fatal(err)
		}
		names = append(names, sent.Name)
	}
	return names
}

func TestGroupIndexKeys(t *testing.T) {
	byAnnotation := kueueMember("k-1", "", "2", "")
	delete(byAnnotation.Labels, kueueGroupLabel)
	byAnnotation.Annotations[kueueGroupLabel] = "train"
	both := member("both", "ours", "2", "", "")
	both.Annotations = map[string]string{kueueGroupLabel: "theirs"}
	tests := []struct {
		name string
		obj  interface{}
		want []string
	}{
		{name: "no group", obj: testPod("alone"), want: nil},
		{name: "our label", obj: member("m", "train", "2", "", ""), want: []string{"ml/pod-group.scheduling.kubenexus.io/name=train"}},
		{name: "Kueue's label", obj: kueueMember("k-0", "train", "2", ""), want: []string{"ml/kueue.x-k8s.io/pod-group-name=train"}},
		{name: "Kueue's annotation", obj: byAnnotation, want: []string{"ml/kueue.x-k8s.io/pod-group-name=train"}},
		{name: "both groups", obj: both, want: []string{"ml/pod-group.scheduling.kubenexus.io/name=ours", "ml/kueue.x-k8s.io/pod-group-name=theirs"}},
		{name: "not a pod", obj: "ml/train", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := groupIndexKeys(tt.obj)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// The index on kube-scheduler's own pod informer: added once for two profiles, kept as pods change.
func TestIndexPodGroupsOnTheInformer(t *testing.T) {
	leaving := kueueMember("train-1", "train", "2", "")
	client := clientsetfake.NewClientset(kueueMember("train-0", "train", "2", ""), leaving, member("ours-0", "train", "1", "", ""))
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Core().V1().Pods().Informer()
	for profile := 0; profile < 2; profile++ {
		if err := indexPodGroups(informer); err != nil {
			t.Fatalf("profile %d: %v", profile, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	kueue := &groupRef{labelKey: kueueGroupLabel, labelValue: "train"}
	if got := listedNames(t, kueue, informer.GetIndexer()); got != "train-0,train-1" {
		t.Fatalf("Kueue group train: %s", got)
	}
	ours := &groupRef{labelKey: groupNameLabel, labelValue: "train"}
	if got := listedNames(t, ours, informer.GetIndexer()); got != "ours-0" {
		t.Fatalf("our group train: %s", got)
	}
	left := leaving.DeepCopy()
	delete(left.Labels, kueueGroupLabel)
	if _, err := client.CoreV1().Pods("ml").Update(ctx, left, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return listedNames(t, kueue, informer.GetIndexer()) == "train-0", nil
	}); err != nil {
		t.Errorf("after train-1 left: %s", listedNames(t, kueue, informer.GetIndexer()))
	}
}

func listedNames(t *testing.T, group *groupRef, pods cache.Indexer) string {
	t.Helper()
	listed, err := group.list(pods, "ml")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(listed))
	for _, pod := range listed {
		names = append(names, pod.Name)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}
