package kubenexus

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// reservedKey holds the service's placement of the pod on the chosen node (cells, GPUs, claims).
const reservedKey fwk.StateKey = Name + "/reserved"

type reserved struct{ placement *placementv1.PodPlacement }

func (r *reserved) Clone() fwk.StateData { return r }

// Reserve mirrors kube-scheduler's choice into the service: the pod's NUMA cells and GPUs on nodeName are
// charged there at once, so that the service's next answers count them.
func (p *Plugin) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	answer, err := readState(state)
	if err == nil && answer.ignored {
		return nil
	}
	if err == nil && answer.gang != nil {
		// PlaceGang reserved every member of the group at once: this one only keeps its placement.
		if answer.gang.GetNode() != nodeName {
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("placement service: the group's plan puts the pod on %s", answer.gang.GetNode()))
		}
		state.Write(reservedKey, &reserved{placement: answer.gang})
		p.hold(pod, answer.gang)
		return nil
	}
	body, err := podJSON(pod)
	if err != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	callCtx, cancel := p.call(ctx)
	defer cancel()
	response, err := p.client.Reserve(callCtx, &placementv1.ReserveRequest{
		PodSource: &placementv1.ReserveRequest_PodJson{PodJson: body},
		NodeNames: []string{nodeName},
	})
	if err != nil {
		status, _ := p.failed(ctx, "Reserve", err)
		return status
	}
	if !response.GetReserved() {
		reasons := make([]string, 0, len(response.GetRejected()))
		for _, group := range response.GetRejected() {
			reasons = append(reasons, group.GetReason())
		}
		sort.Strings(reasons)
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("placement service refused node %s: %s", nodeName, strings.Join(reasons, "; ")))
	}
	state.Write(reservedKey, &reserved{placement: response.GetPlacement()})
	return nil
}

// Unreserve takes the pod out of the claims PreBind reserved for it, releases the service's reservation
// (idempotent: the service says whether one was held) and, for a gang member, rejects the members waiting at
// Permit: a gang binds whole or not at all.
func (p *Plugin) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ string) {
	if data, err := state.Read(reservedKey); err == nil {
		for _, claim := range data.(*reserved).placement.GetClaims() {
			if err := p.releaseClaim(ctx, pod, claim); err != nil {
				klog.FromContext(ctx).Error(err, "Releasing a claim's reservation failed", "pod", klog.KObj(pod), "claim", claim.GetName())
			}
		}
	}
	callCtx, cancel := p.call(ctx)
	defer cancel()
	if _, err := p.client.Unreserve(callCtx, &placementv1.UnreserveRequest{Pod: podRef(pod)}); err != nil {
		klog.FromContext(ctx).Error(err, "Placement service Unreserve failed; the reservation expires on its own", "pod", klog.KObj(pod))
	}
	p.release(pod)
	if group := p.forget(pod); group != "" {
		p.rejectGroup(group, fmt.Sprintf("member %s/%s of pod group %s was unreserved", pod.Namespace, pod.Name, group))
	}
}

func podRef(pod *v1.Pod) *placementv1.PodRef {
	return &placementv1.PodRef{Namespace: pod.Namespace, Name: pod.Name}
}

// Permit is the gang barrier: a member waits until the service says its group is reserved and enough of the
// group is past Reserve here (barrier), then the whole group is allowed at once; a group the service gives up
// on is rejected whole. A pod outside any group passes.
func (p *Plugin) Permit(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ string) (*fwk.Status, time.Duration) {
	if answer, err := readState(state); err == nil && answer.ignored {
		return nil, 0
	}
	if gangKey(pod) == "" {
		return nil, 0 // a pod outside any group has nothing to wait for: no call on the hot path
	}
	response, err := p.permitStatus(ctx, pod)
	if err == nil && response.GetState() == placementv1.PermitState_PERMIT_STATE_REJECT {
		if answer, readErr := readState(state); readErr == nil && answer.gang != nil {
			// The service tells a released member REJECT once, so that a scheduler holding the old placement
			// plans again. This cycle's PreFilter planned the group anew (PlaceGang): that notice is about an
			// earlier reservation, so the service is asked again; a rejection that stands is repeated.
			response, err = p.permitStatus(ctx, pod)
		}
	}
	if err != nil {
		status, _ := p.failed(ctx, "PermitStatus", err)
		return status, 0
	}
	p.arrived(pod)
	group := response.GetPodGroup()
	switch response.GetState() {
	case placementv1.PermitState_PERMIT_STATE_ALLOW:
		if group == "" {
			p.release(pod) // the service knows no group of the pod: nothing to wait for
			return nil, 0
		}
		return p.barrier(ctx, pod, group, response.GetMinMember())
	case placementv1.PermitState_PERMIT_STATE_WAIT:
		p.remember(pod, group)
		message := fmt.Sprintf("waiting for pod group %s: %d/%d ready", group, response.GetReady(), response.GetMinMember())
		return fwk.NewStatus(fwk.Wait, message), p.args.PermitTimeout.Duration
	default:
		reason := response.GetReason()
		if group != "" {
			p.rejectGroup(group, reason)
		}
		return fwk.NewStatus(fwk.Unschedulable, "placement service: "+reason), 0
	}
}

func (p *Plugin) permitStatus(ctx context.Context, pod *v1.Pod) (*placementv1.PermitStatusResponse, error) {
	callCtx, cancel := p.call(ctx)
	defer cancel()
	return p.client.PermitStatus(callCtx, &placementv1.PermitStatusRequest{Pod: podRef(pod)})
}

func (p *Plugin) remember(pod *v1.Pod, group string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.groups[pod.UID] = group
}

func (p *Plugin) forget(pod *v1.Pod) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	group := p.groups[pod.UID]
	delete(p.groups, pod.UID)
	return group
}

// members takes the group's waiting members out of the book.
func (p *Plugin) members(group string) []fwk.WaitingPod {
	var waiting []fwk.WaitingPod
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		p.mu.Lock()
		defer p.mu.Unlock()
		uid := wp.GetPod().UID
		if p.groups[uid] == group {
			delete(p.groups, uid)
			waiting = append(waiting, wp)
		}
	})
	return waiting
}

func (p *Plugin) allowGroup(group string) {
	for _, wp := range p.members(group) {
		wp.Allow(Name)
	}
}

func (p *Plugin) rejectGroup(group, reason string) {
	for _, wp := range p.members(group) {
		wp.Reject(Name, "placement service: "+reason)
	}
}
