package kubenexus

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// PostFilter carries out the service's preemption plan for a pod that fits nowhere (a gang member: for its
// whole group): the service chooses the victims (lower priority, gangs whole, disruption budgets kept, the
// exact plan checked without them) and holds the nominated nodes for the pod (the group's members); the
// plugin evicts them through the Eviction API (the API server checks each victim's budget once more; a
// refusal stops the plan) and nominates the node. It replaces DefaultPreemption in the profile: that plugin
// cannot pick the nodes the PreFilterResult left out.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if answer, err := readState(state); err == nil && answer.ignored {
		return nil, fwk.NewStatus(fwk.Unschedulable, "placement service unavailable: no preemption")
	}
	request, status := p.preemptor(pod)
	if status != nil {
		return nil, status
	}
	callCtx, cancel := p.call(ctx)
	defer cancel()
	plan, err := p.client.Preempt(callCtx, request)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, classify("Preempt", err).Error())
	}
	if !plan.GetPreempted() {
		return nil, fwk.NewStatus(fwk.Unschedulable, "placement service: no preemption: "+plan.GetReason())
	}
	node := nominatedNode(plan, pod)
	if node == "" {
		return nil, fwk.NewStatus(fwk.Unschedulable, "placement service: the preemption plan nominates no node for the pod")
	}
	if len(plan.GetVictims()) == 0 {
		// The service finds room without evicting anyone: the pod failed for another reason (a group still
		// waiting for its members). A nomination would only make kube-scheduler count the pod on the node
		// for every other pod's Filter (its nominated pods), refusing the very members it waits for.
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("placement service: no preemption: node %s has room without evicting any pod", node))
	}
	for _, victim := range plan.GetVictims() {
		if err := p.evict(ctx, pod, victim); err != nil {
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("preemption on node %s stopped: %v", node, err))
		}
	}
	klog.FromContext(ctx).V(2).Info("Preempted for the placement service's plan", "pod", klog.KObj(pod), "node", node, "victims", len(plan.GetVictims()))
	return &fwk.PostFilterResult{NominatingInfo: &fwk.NominatingInfo{NominatedNodeName: node, NominatingMode: fwk.ModeOverride}}, fwk.NewStatus(fwk.Success)
}

// preemptor is what the service is asked to make room for: a gang member's whole group (its pending
// members: the service evicts for all of them at once, gangs among the victims whole), else the pod alone.
func (p *Plugin) preemptor(pod *v1.Pod) (*placementv1.PreemptRequest, *fwk.Status) {
	group, err := groupOf(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	if group != nil && p.pods != nil {
		podGroup, status := p.pendingGroup(pod, group)
		if status != nil {
			return nil, fwk.NewStatus(fwk.Unschedulable, status.Message())
		}
		return &placementv1.PreemptRequest{Group: podGroup}, nil
	}
	body, err := podJSON(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	return &placementv1.PreemptRequest{PodJson: body}, nil
}

func nominatedNode(plan *placementv1.PreemptResponse, pod *v1.Pod) string {
	for _, nomination := range plan.GetNominations() {
		ref := nomination.GetPod()
		if ref.GetName() == pod.Name && (ref.GetNamespace() == pod.Namespace || (ref.GetNamespace() == "" && pod.Namespace == "default")) {
			return nomination.GetNode()
		}
	}
	return ""
}

// evict asks the API server to evict one victim; one already gone counts as evicted.
func (p *Plugin) evict(ctx context.Context, preemptor *v1.Pod, victim *placementv1.Victim) error {
	ref := victim.GetPod()
	namespace := ref.GetNamespace()
	if namespace == "" {
		namespace = "default"
	}
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: ref.GetName(), Namespace: namespace}}
	err := p.handle.ClientSet().PolicyV1().Evictions(namespace).Evict(ctx, eviction)
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		return fmt.Errorf("evicting %s/%s: a disruption budget refused it: %s", namespace, ref.GetName(), strings.TrimSpace(err.Error()))
	default:
		return fmt.Errorf("evicting %s/%s: %w", namespace, ref.GetName(), err)
	}
	evicted := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ref.GetName(), Namespace: namespace}}
	// The message starts as kube-scheduler's (pkg/scheduler/framework/preemption/preemption.go).
	p.handle.EventRecorder().Eventf(evicted, preemptor, v1.EventTypeNormal, "Preempted", "Preempting",
		"Preempted by pod %v on node %v", preemptor.UID, victim.GetNode())
	return nil
}
