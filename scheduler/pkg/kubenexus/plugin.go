// Package kubenexus is the KubeNexus kube-scheduler framework plugin: a thin gRPC client of the placement
// service. One call per scheduling cycle on the hot path: PreFilter asks the service for the pod's feasible
// nodes and their scores (Score RPC) and keeps the answer in CycleState, where Filter and Score read it.
// Reserve and Unreserve mirror kube-scheduler's assumption into the service (its NUMA cells and GPUs are
// charged at once); Permit is the gang barrier (PermitStatus, then the group's members past Reserve here);
// PreBind writes the service's devices into the pod's claims and Bind binds the pod with its placement;
// PostFilter carries out the service's preemption plan (Preempt).
package kubenexus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "KubeNexus"

const stateKey fwk.StateKey = Name

// Plugin implements PreFilter, Filter, PostFilter, Score, Reserve, Permit, PreBind and Bind.
type Plugin struct {
	args   *Args
	conn   *grpc.ClientConn
	client placementv1.PlacementClient
	handle fwk.Handle
	pods   cache.Indexer // kube-scheduler's pod informer, indexed by pod group (podGroupIndex)

	mu     sync.Mutex
	groups map[types.UID]string // waiting gang members -> their group ("namespace/name")
	gangs  map[string]*gangBook // what this scheduler knows of each group with members in flight
}

var (
	_ fwk.PreFilterPlugin  = (*Plugin)(nil)
	_ fwk.FilterPlugin     = (*Plugin)(nil)
	_ fwk.ScorePlugin      = (*Plugin)(nil)
	_ fwk.ReservePlugin    = (*Plugin)(nil)
	_ fwk.PermitPlugin     = (*Plugin)(nil)
	_ fwk.PreBindPlugin    = (*Plugin)(nil)
	_ fwk.BindPlugin       = (*Plugin)(nil)
	_ fwk.PostFilterPlugin = (*Plugin)(nil)
)

// New is the plugin's factory (frameworkruntime.PluginFactory): its args are validated here, so that a
// wrong configuration stops kube-scheduler at start with the reason.
func New(_ context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	return newWithClient(args, handle)
}

func newWithClient(args *Args, handle fwk.Handle) (*Plugin, error) {
	var pods cache.Indexer
	if handle != nil && handle.SharedInformerFactory() != nil {
		informer := handle.SharedInformerFactory().Core().V1().Pods().Informer()
		if err := indexPodGroups(informer); err != nil {
			return nil, err
		}
		pods = informer.GetIndexer()
	}
	conn, client, err := dial(args)
	if err != nil {
		return nil, err
	}
	return &Plugin{args: args, conn: conn, client: client, handle: handle, pods: pods, groups: map[types.UID]string{}, gangs: map[string]*gangBook{}}, nil
}

// Name returns the plugin's name.
func (p *Plugin) Name() string { return Name }

// Close releases the connection to the service.
func (p *Plugin) Close() error { return p.conn.Close() }

// cycleState is the service's answer for the pod of this cycle.
type cycleState struct {
	ignored  bool               // the service could not answer and the failure policy is Ignore
	scores   map[string]float64 // feasible nodes and their scores, 0..100
	rejected map[string]rejection
	gang     *placementv1.PodPlacement // a group member's placement, reserved with its group by PlaceGang
}

type rejection struct {
	reason string
	kind   placementv1.RejectionKind
}

// Clone shares the maps: nothing changes them after PreFilter.
func (s *cycleState) Clone() fwk.StateData { return s }

func readState(state fwk.CycleState) (*cycleState, error) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("%s: no PreFilter answer in the cycle state: %w", Name, err)
	}
	s, ok := data.(*cycleState)
	if !ok {
		return nil, fmt.Errorf("%s: cycle state holds %T", Name, data)
	}
	return s, nil
}

func podJSON(pod *v1.Pod) (string, error) {
	data, err := json.Marshal(pod)
	if err != nil {
		return "", fmt.Errorf("%s: pod %s/%s: %w", Name, pod.Namespace, pod.Name, err)
	}
	return string(data), nil
}

func (p *Plugin) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.args.Timeout.Duration)
}

// failed turns an RPC error into the status its failure policy asks for: a refused pod is unschedulable
// (whatever the policy); otherwise Fail gives an Error (the pod is retried with backoff) and Ignore skips.
func (p *Plugin) failed(ctx context.Context, rpc string, err error) (*fwk.Status, bool) {
	err = classify(rpc, err)
	if errors.Is(err, errPodRefused) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error()), false
	}
	if p.args.FailurePolicy == FailurePolicyIgnore {
		klog.FromContext(ctx).Info("Placement service unavailable, failure policy Ignore", "rpc", rpc, "err", err)
		return nil, true
	}
	return fwk.AsStatus(err), false
}

// PreFilter asks the service once for the pod's feasible nodes and their scores.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	group, err := groupOf(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if group != nil && p.pods != nil {
		return p.preFilterGang(ctx, state, pod, group)
	}
	body, err := podJSON(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	callCtx, cancel := p.call(ctx)
	defer cancel()
	response, err := p.client.Score(callCtx, &placementv1.ScoreRequest{
		PodSource:        &placementv1.ScoreRequest_PodJson{PodJson: body},
		WithoutBreakdown: true,
	})
	if err != nil {
		status, ignored := p.failed(ctx, "Score", err)
		if ignored {
			state.Write(stateKey, &cycleState{ignored: true})
			return nil, fwk.NewStatus(fwk.Skip)
		}
		return nil, status
	}
	answer := answerOf(response)
	state.Write(stateKey, answer)
	if len(answer.scores) == 0 {
		return nil, answer.refusal()
	}
	return &fwk.PreFilterResult{NodeNames: sets.KeySet(answer.scores)}, nil
}

func answerOf(response *placementv1.ScoreResponse) *cycleState {
	answer := &cycleState{scores: make(map[string]float64, len(response.GetNodes())), rejected: map[string]rejection{}}
	for i, node := range response.GetNodes() {
		score := 0.0
		if i < len(response.GetScores()) {
			score = response.GetScores()[i]
		}
		answer.scores[node] = score
	}
	for _, group := range response.GetRejected() {
		for _, node := range group.GetNodes() {
			answer.rejected[node] = rejection{reason: group.GetReason(), kind: group.GetKind()}
		}
	}
	return answer
}

// refusal is PreFilter's status when no node is feasible: the service's reasons, counted as kube-scheduler
// counts them ("3 node(s) had untolerated taint ..."), Unschedulable when evicting pods could help.
func (s *cycleState) refusal() *fwk.Status {
	counts := map[string]int{}
	code := fwk.UnschedulableAndUnresolvable
	for _, r := range s.rejected {
		counts[r.reason]++
		if resolvable(r.kind) {
			code = fwk.Unschedulable
		}
	}
	reasons := make([]string, 0, len(counts))
	for reason, count := range counts {
		reasons = append(reasons, fmt.Sprintf("%d %s", count, reason))
	}
	sort.Strings(reasons)
	if len(reasons) == 0 {
		reasons = append(reasons, "the placement service knows no node")
	}
	return fwk.NewStatus(code, "placement service: "+strings.Join(reasons, ", "))
}

// resolvable says whether evicting pods could make a node fit: resources, the kubelet's admission, placed
// pods in the way. A node's own constraints, an unknown node or an intent are not.
func resolvable(kind placementv1.RejectionKind) bool {
	switch kind {
	case placementv1.RejectionKind_REJECTION_KIND_INSUFFICIENT_RESOURCES,
		placementv1.RejectionKind_REJECTION_KIND_KUBELET_TOPOLOGY,
		placementv1.RejectionKind_REJECTION_KIND_ISOLATION,
		placementv1.RejectionKind_REJECTION_KIND_HELD_FOR_GANG,
		placementv1.RejectionKind_REJECTION_KIND_POD_CONSTRAINT:
		return true
	default:
		return false
	}
}

// PreFilterExtensions: none; the service's answer does not change with kube-scheduler's what-if pods.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter reads PreFilter's answer: a node the service found feasible passes; any other gets its reason.
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	answer, err := readState(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if answer.ignored {
		return nil
	}
	name := nodeInfo.Node().Name
	if _, ok := answer.scores[name]; ok {
		return nil
	}
	if r, ok := answer.rejected[name]; ok {
		code := fwk.UnschedulableAndUnresolvable
		if resolvable(r.kind) {
			code = fwk.Unschedulable
		}
		return fwk.NewStatus(code, r.reason)
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) unknown to the placement service")
}

// Score is the service's score (0..100) of a feasible node.
func (p *Plugin) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	answer, err := readState(state)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	score := answer.scores[nodeInfo.Node().Name]
	return int64(math.Round(math.Max(0, math.Min(float64(fwk.MaxNodeScore), score)))), nil
}

// ScoreExtensions: none; the service's scores are already 0..100.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }
