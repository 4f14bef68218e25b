package kubenexus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// A pod group by the project's labels (placement/core/annotations.py): its name, and the members that must be
// placed together (every member's count when absent).
const (
	groupNameLabel    = "pod-group.scheduling.kubenexus.io/name"
	minAvailableLabel = "pod-group.scheduling.kubenexus.io/min-available"
)

// A Kueue pod group of plain pods (sigs.k8s.io/kueue pkg/controller/jobs/pod/constants/constants.go,
// GroupNameAnnotation, GroupNameLabel and GroupTotalCountAnnotation): its name, and how many pods it has, all
// placed together. The name is an annotation when set, else a label of the same key, as Kueue reads it
// (pkg/util/pod/pod.go GetPodGroupName; it writes only the annotation itself); placement/core/kueue.py reads it
// the same way.
const (
	kueueGroupLabel           = "kueue.x-k8s.io/pod-group-name"
	kueueTotalCountAnnotation = "kueue.x-k8s.io/pod-group-total-count"
)

// A service group name longer than a label value ends with "_" and this many hex digits of its SHA-256.
const groupDigestChars = 10

// groupRef is the group a pod joins: the name the service knows it by, the key that names it on its members
// (our label, or Kueue's annotation or label) and the name there, and its minimum (0 when not given as a
// positive integer: the service then refuses the group with the reason).
type groupRef struct {
	name       string
	labelKey   string
	labelValue string
	minimum    int32
}

// podGroupIndex indexes kube-scheduler's pod informer by the groups each pod names (groupIndexKeys): a group's
// members are one lookup away, not a scan of the namespace's pods.
const podGroupIndex = "kubenexus.io/pod-group"

// groupIndexKeys are the index keys of the groups a pod names, ours and Kueue's, each with its namespace. A pod
// naming both is under both keys: the service refuses it with the reason, and each group still counts it.
func groupIndexKeys(obj interface{}) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return nil, nil
	}
	var keys []string
	if name := pod.Labels[groupNameLabel]; name != "" {
		keys = append(keys, groupIndexKey(pod.Namespace, groupNameLabel, name))
	}
	if name := kueueGroupOf(pod); name != "" {
		keys = append(keys, groupIndexKey(pod.Namespace, kueueGroupLabel, name))
	}
	return keys, nil
}

func groupIndexKey(namespace, key, name string) string {
	return namespace + "/" + key + "=" + name
}

// indexPodGroups adds podGroupIndex to the pod informer, once however many profiles run the plugin over it.
func indexPodGroups(informer cache.SharedIndexInformer) error {
	if _, done := informer.GetIndexer().GetIndexers()[podGroupIndex]; done {
		return nil
	}
	if err := informer.AddIndexers(cache.Indexers{podGroupIndex: groupIndexKeys}); err != nil {
		return fmt.Errorf("%s: indexing the pod informer by pod group: %w", Name, err)
	}
	return nil
}

// list is the group's pods in the namespace, from kube-scheduler's pod informer indexed by podGroupIndex.
func (g *groupRef) list(pods cache.Indexer, namespace string) ([]*v1.Pod, error) {
	objects, err := pods.ByIndex(podGroupIndex, groupIndexKey(namespace, g.labelKey, g.labelValue))
	if err != nil {
		return nil, err
	}
	found := make([]*v1.Pod, 0, len(objects))
	for _, object := range objects {
		if pod, ok := object.(*v1.Pod); ok {
			found = append(found, pod)
		}
	}
	return found, nil
}

// kueueGroupOf is the name of the Kueue pod group the pod joins ("" for none): the annotation, else the label.
func kueueGroupOf(pod *v1.Pod) string {
	if name := pod.Annotations[kueueGroupLabel]; name != "" {
		return name
	}
	return pod.Labels[kueueGroupLabel]
}

// preFilterGang plans the pod's whole group at once (PlaceGang: every member's node, cells and GPUs, within
// the group's topology constraints, reserved together) and narrows this member's cycle to its planned node.
// A group that does not fit waits as a whole: no member is placed alone.
func (p *Plugin) preFilterGang(ctx context.Context, state fwk.CycleState, pod *v1.Pod, group *groupRef) (*fwk.PreFilterResult, *fwk.Status) {
	key := pod.Namespace + "/" + group.name
	podGroup, status := p.pendingGroup(pod, group)
	if status != nil {
		return nil, status
	}
	request := &placementv1.PlaceGangRequest{Group: podGroup}
	callCtx, cancel := p.call(ctx)
	defer cancel()
	response, err := p.client.PlaceGang(callCtx, request)
	if err != nil {
		status, ignored := p.failed(ctx, "PlaceGang", err)
		if ignored {
			state.Write(stateKey, &cycleState{ignored: true})
			return nil, fwk.NewStatus(fwk.Skip)
		}
		return nil, status
	}
	switch response.GetState() {
	case placementv1.GangState_GANG_STATE_PLACED:
		p.planned(pod, response.GetMembers())
		for _, member := range response.GetMembers() {
			if member.GetPod().GetName() == pod.Name {
				placement := member.GetPlacement()
				state.Write(stateKey, &cycleState{
					scores:   map[string]float64{placement.GetNode(): placement.GetScore()},
					rejected: map[string]rejection{},
					gang:     placement,
				})
				return &fwk.PreFilterResult{NodeNames: sets.New(placement.GetNode())}, nil
			}
		}
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("placement service: pod group %s is placed without this member", key))
	case placementv1.GangState_GANG_STATE_INFEASIBLE:
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("placement service: pod group %s: %s", key, response.GetReason()))
	default:
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("placement service: pod group %s waits: %s", key, response.GetReason()))
	}
}

// pendingGroup is the pod's group as the binder asks for it: the pending members (this pod first), and how
// many of them the group still needs beside those bound (a group placed earlier answers with its members'
// reservations; one scaled up is planned next to them). Until the group's minimum is present: unresolvable,
// as coscheduling's PreFilter answers it (members arrive one by one; a member's arrival requeues the others,
// the plugin registering no narrower events than kube-scheduler's default; evicting pods would not bring
// them).
func (p *Plugin) pendingGroup(pod *v1.Pod, group *groupRef) (*placementv1.PodGroup, *fwk.Status) {
	members, bound, err := p.groupMembers(pod, group)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	minimum := group.minimum
	if present := len(members) + bound; present < int(minimum) {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("pod group %s/%s waits for its members: %d of %d present", pod.Namespace, group.name, present, minimum))
	}
	// The service holds the group's reservation as long as a member may wait at Permit here: a shorter hold
	// would release it under waiting members, and the group would be planned again.
	holdFor := int32(math.Ceil(p.args.PermitTimeout.Seconds()))
	podGroup := &placementv1.PodGroup{
		Namespace: pod.Namespace, Name: group.name, MinMember: max(0, minimum-int32(bound)), MembersJson: make([]string, 0, len(members)),
		ScheduleTimeoutSeconds: &holdFor,
	}
	for _, member := range members {
		body, err := podJSON(member)
		if err != nil {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
		podGroup.MembersJson = append(podGroup.MembersJson, body)
	}
	return podGroup, nil
}

// groupOf is the group the pod joins (nil for a lone pod), by the project's labels or Kueue's, as
// placement/core/gang_sources.py group_of reads them; a pod naming both is refused, as there.
func groupOf(pod *v1.Pod) (*groupRef, error) {
	ours, kueue := pod.Labels[groupNameLabel], kueueGroupOf(pod)
	switch {
	case ours != "" && kueue != "":
		return nil, fmt.Errorf("pod %s/%s joins more than one pod group (label %s=%s and Kueue's %s=%s); accepted: one group per pod",
			pod.Namespace, pod.Name, groupNameLabel, ours, kueueGroupLabel, kueue)
	case ours != "":
		return &groupRef{name: ours, labelKey: groupNameLabel, labelValue: ours, minimum: positiveInt32(pod.Labels[minAvailableLabel])}, nil
	case kueue != "":
		return &groupRef{
			name: kueueGroupName(kueue), labelKey: kueueGroupLabel, labelValue: kueue,
			minimum: positiveInt32(pod.Annotations[kueueTotalCountAnnotation]),
		}, nil
	}
	return nil, nil
}

// kueueGroupName is the service's name for a Kueue group, as PodGroupKey.group_name
// (placement/core/gang_sources.py) names a group of an object source: "kueue_<name>", a label value unique
// in the namespace across sources; one longer than a label value keeps its head and ends with a digest of the
// full name, stable across restarts and replicas.
func kueueGroupName(name string) string {
	full := "kueue_" + name
	if len(validation.IsValidLabelValue(full)) == 0 {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	head := strings.TrimRight(full[:min(len(full), validation.LabelValueMaxLength-groupDigestChars-1)], "-_.")
	return head + "_" + hex.EncodeToString(sum[:])[:groupDigestChars]
}

// positiveInt32 is a group's minimum as written on a pod; 0 when absent or not a positive integer.
func positiveInt32(value string) int32 {
	parsed, err := strconv.ParseInt(value, 10, 32)
	if err != nil || parsed < 1 {
		return 0
	}
	return int32(parsed)
}

// groupMembers are the group's members of this scheduler not bound yet (this pod first, the others by name)
// and how many members are bound already, from kube-scheduler's own pod informer.
func (p *Plugin) groupMembers(pod *v1.Pod, group *groupRef) ([]*v1.Pod, int, error) {
	listed, err := group.list(p.pods, pod.Namespace)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: listing the members of pod group %s/%s: %w", Name, pod.Namespace, group.name, err)
	}
	members, bound := []*v1.Pod{pod}, 0
	for _, member := range listed {
		switch {
		case member.UID == pod.UID || member.DeletionTimestamp != nil:
		case member.Spec.NodeName != "":
			bound++
		case member.Spec.SchedulerName == pod.Spec.SchedulerName:
			members = append(members, member)
		}
	}
	sort.Slice(members[1:], func(i, j int) bool { return members[1+i].Name < members[1+j].Name })
	return members, bound, nil
}
