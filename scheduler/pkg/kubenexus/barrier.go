package kubenexus

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// gangBook is what this scheduler knows of a group with members in flight: the service's latest plan for it,
// the placement each member holds since its Reserve, and the members past Reserve (waiting at Permit, or
// allowed and binding) that are not yet seen bound.
type gangBook struct {
	plan map[string]*placementv1.PodPlacement // pod name -> planned placement (the last PlaceGang answer)
	held map[types.UID]heldPlacement
	past map[types.UID]bool
}

type heldPlacement struct {
	name      string
	placement *placementv1.PodPlacement
}

// gangKey is the book's key of a group member: "namespace/name" as the service names the group ("" for a
// lone pod, and for one naming two groups, which PreFilter refuses).
func gangKey(pod *v1.Pod) string {
	if group, err := groupOf(pod); err == nil && group != nil {
		return pod.Namespace + "/" + group.name
	}
	return ""
}

// book is the group's entry, made when missing; p.mu must be held.
func (p *Plugin) book(key string) *gangBook {
	book := p.gangs[key]
	if book == nil {
		book = &gangBook{plan: map[string]*placementv1.PodPlacement{}, held: map[types.UID]heldPlacement{}, past: map[types.UID]bool{}}
		p.gangs[key] = book
	}
	return book
}

// planned keeps the service's plan for the pod's group (every member's placement in a PlaceGang answer).
func (p *Plugin) planned(pod *v1.Pod, members []*placementv1.MemberPlacement) {
	p.mu.Lock()
	defer p.mu.Unlock()
	book := p.book(gangKey(pod))
	book.plan = make(map[string]*placementv1.PodPlacement, len(members))
	for _, member := range members {
		book.plan[member.GetPod().GetName()] = member.GetPlacement()
	}
}

// hold records the placement a member reserved (its group's plan when it passed Reserve).
func (p *Plugin) hold(pod *v1.Pod, placement *placementv1.PodPlacement) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.book(gangKey(pod)).held[pod.UID] = heldPlacement{name: pod.Name, placement: placement}
}

// arrived counts a member past Reserve here, at Permit (waiting, or allowed and binding) until it is seen bound.
func (p *Plugin) arrived(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.book(gangKey(pod)).past[pod.UID] = true
}

// release takes a member out of its group's book (Unreserve: it goes back to the queue).
func (p *Plugin) release(pod *v1.Pod) {
	key := gangKey(pod)
	if key == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if book := p.gangs[key]; book != nil {
		delete(book.held, pod.UID)
		delete(book.past, pod.UID)
		if len(book.held) == 0 && len(book.past) == 0 {
			delete(p.gangs, key)
		}
	}
}

// barrier holds a member whose group the service has reserved until enough of the group is past Reserve in
// this scheduler: kube-scheduler's own plugins may still refuse a member the service placed, and a gang binds
// whole or not at all. As coscheduling's Permit (sigs.k8s.io/scheduler-plugins pkg/coscheduling, its
// CalculateAssignedPods against minMember): the members bound, plus those waiting at Permit or allowed past it
// here, this one included, against the group's minimum. The last member to arrive allows the waiting ones.
//
// Before that, every waiting member's placement is checked against the group's latest plan: a service that
// restarted (or planned the group again) while members waited may have put them elsewhere. The group is then
// rejected whole, and its members go through again under the new plan; no member binds with a placement the
// service no longer holds for it.
func (p *Plugin) barrier(ctx context.Context, pod *v1.Pod, group string, minimum int32) (*fwk.Status, time.Duration) {
	key := gangKey(pod)
	if stale := p.stale(key); len(stale) > 0 {
		reason := fmt.Sprintf("pod group %s was planned again while %s waited with an earlier placement", group, strings.Join(stale, ", "))
		p.rejectGroup(group, reason)
		return fwk.NewStatus(fwk.Unschedulable, "placement service: "+reason), 0
	}
	present, needed := p.pastReserve(pod, key, minimum)
	if present >= needed {
		p.allowGroup(group)
		p.mu.Lock()
		delete(p.gangs, key) // complete: a member beyond the minimum counts the others bound, from the informer
		p.mu.Unlock()
		return nil, 0
	}
	p.remember(pod, group)
	klog.FromContext(ctx).V(2).Info("Pod group member waits at Permit", "pod", klog.KObj(pod), "podGroup", group, "scheduled", present, "minMember", needed)
	return fwk.NewStatus(fwk.Wait, fmt.Sprintf("waiting for pod group %s: %d/%d members scheduled", group, present, needed)), p.args.PermitTimeout.Duration
}

// stale names the group's waiting members whose held placement is not the group's latest plan for them.
func (p *Plugin) stale(key string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	book := p.gangs[key]
	if book == nil {
		return nil
	}
	var names []string
	for uid, held := range book.held {
		if _, waiting := p.groups[uid]; !waiting {
			continue
		}
		if planned, ok := book.plan[held.name]; ok && !samePlacement(planned, held.placement) {
			names = append(names, held.name)
		}
	}
	sort.Strings(names)
	return names
}

// pastReserve counts the group's members bound or past Reserve here (this pod included) and says how many the
// group needs: the service's minimum, else the pod's (min-available label, Kueue's total count), else every
// member listed.
func (p *Plugin) pastReserve(pod *v1.Pod, key string, minimum int32) (int, int) {
	counted := map[types.UID]bool{pod.UID: true}
	needed := int(minimum)
	var listed []*v1.Pod
	if group, err := groupOf(pod); err == nil && group != nil {
		if needed <= 0 {
			needed = int(group.minimum)
		}
		if p.pods != nil {
			if found, err := group.list(p.pods, pod.Namespace); err == nil {
				listed = found
			}
		}
	}
	if needed <= 0 {
		needed = len(listed)
	}
	existing := map[types.UID]bool{}
	for _, member := range listed {
		existing[member.UID] = true
		if member.Spec.NodeName != "" && member.DeletionTimestamp == nil {
			counted[member.UID] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	book := p.book(key)
	for uid := range book.past {
		bound := counted[uid] && uid != pod.UID
		if bound || (p.pods != nil && !existing[uid] && uid != pod.UID) {
			delete(book.past, uid) // seen bound (counted from the informer from now on), or deleted
			delete(book.held, uid)
			continue
		}
		counted[uid] = true
	}
	return len(counted), needed
}

// samePlacement compares what a member holds: its node, NUMA cells, GPUs and claims' devices.
func samePlacement(a, b *placementv1.PodPlacement) bool {
	if a.GetNode() != b.GetNode() || !slices.Equal(a.GetNumaCells(), b.GetNumaCells()) || !slices.Equal(a.GetGpuIds(), b.GetGpuIds()) {
		return false
	}
	return slices.EqualFunc(a.GetClaims(), b.GetClaims(), func(x, y *placementv1.ClaimAllocation) bool {
		return x.GetNamespace() == y.GetNamespace() && x.GetName() == y.GetName() &&
			slices.EqualFunc(x.GetDevices(), y.GetDevices(), func(d, e *placementv1.AllocatedDevice) bool { return proto.Equal(d, e) })
	})
}
