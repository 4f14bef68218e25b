package kubenexus

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// A pod group by the project's labels (placement/core/annotations.py): its name, and the members that must be
// placed together (every member's count when absent).
const (
	groupNameLabel    = "pod-group.scheduling.kubenexus.io/name"
	minAvailableLabel = "pod-group.scheduling.kubenexus.io/min-available"
)

// preFilterGang plans the pod's whole group at once (PlaceGang: every member's node, cells and GPUs, within
// the group's topology constraints, reserved together) and narrows this member's cycle to its planned node.
// A group that does not fit waits as a whole: no member is placed alone.
func (p *Plugin) preFilterGang(ctx context.Context, state fwk.CycleState, pod *v1.Pod, group string) (*fwk.PreFilterResult, *fwk.Status) {
	key := pod.Namespace + "/" + group
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
func (p *Plugin) pendingGroup(pod *v1.Pod, group string) (*placementv1.PodGroup, *fwk.Status) {
	members, bound, err := p.groupMembers(pod, group)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	minimum := minMember(pod)
	if present := len(members) + bound; present < int(minimum) {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("pod group %s/%s waits for its members: %d of %d present", pod.Namespace, group, present, minimum))
	}
	// The service holds the group's reservation as long as a member may wait at Permit here: a shorter hold
	// would release it under waiting members, and the group would be planned again.
	holdFor := int32(math.Ceil(p.args.PermitTimeout.Seconds()))
	podGroup := &placementv1.PodGroup{
		Namespace: pod.Namespace, Name: group, MinMember: max(0, minimum-int32(bound)), MembersJson: make([]string, 0, len(members)),
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

// groupOf is the name of the pod's group by the project's labels ("" for a lone pod).
func groupOf(pod *v1.Pod) string {
	return pod.Labels[groupNameLabel]
}

// minMember is the min-available label's value; 0 (every member) when absent or not a positive integer, which
// the service then refuses with the reason naming the label.
func minMember(pod *v1.Pod) int32 {
	value, err := strconv.ParseInt(pod.Labels[minAvailableLabel], 10, 32)
	if err != nil || value < 1 {
		return 0
	}
	return int32(value)
}

// groupMembers are the group's members of this scheduler not bound yet (this pod first, the others by name)
// and how many members are bound already, from kube-scheduler's own pod informer.
func (p *Plugin) groupMembers(pod *v1.Pod, group string) ([]*v1.Pod, int, error) {
	listed, err := p.pods.Pods(pod.Namespace).List(labels.SelectorFromSet(labels.Set{groupNameLabel: group}))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: listing the members of pod group %s/%s: %w", Name, pod.Namespace, group, err)
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
