package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

// Case is one cluster and one pod to schedule in it.
type Case struct {
	Nodes          []v1.Node                  `json:"nodes"`
	Pods           []v1.Pod                   `json:"pods"`
	Namespaces     []v1.Namespace             `json:"namespaces"`
	Claims         []v1.PersistentVolumeClaim `json:"claims"`
	Volumes        []v1.PersistentVolume      `json:"volumes"`
	StorageClasses []storagev1.StorageClass   `json:"storageClasses"`
	Pod            v1.Pod                     `json:"pod"`
}

// Verdict is a framework Status as the oracle reports it.
type Verdict struct {
	Code    string   `json:"code"`
	Plugin  string   `json:"plugin,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
}

// Scores are one feasible node's normalised score per plugin (before its weight) and the weighted total.
type Scores struct {
	Plugins map[string]int64 `json:"plugins"`
	Total   int64            `json:"total"`
}

// Answer is upstream's judgement of one case. PreEnqueue or PreFilter set: the pod was refused before any
// node was judged (Nodes is then empty). ScoreError: PreScore or Score failed (Scores is then empty).
type Answer struct {
	PreEnqueue *Verdict           `json:"preEnqueue,omitempty"`
	PreFilter  *Verdict           `json:"preFilter,omitempty"`
	Nodes      map[string]Verdict `json:"nodes,omitempty"`
	Scores     map[string]Scores  `json:"scores,omitempty"`
	Weights    map[string]int32   `json:"weights,omitempty"`
	ScoreError string             `json:"scoreError,omitempty"`
}

// outOfScope are the default profile's plugins the oracle leaves out: the project does not model them
// (NodeVolumeLimits, VolumeZone, image locality and balanced allocation scores), preemption is not run,
// and DynamicResources needs a DRA manager (the DRA allocator has its own oracle, tests/oracles/dra).
var outOfScope = []string{
	names.DefaultPreemption,
	names.NodeVolumeLimits,
	names.VolumeZone,
	names.ImageLocality,
	names.NodeResourcesBalancedAllocation,
	names.DynamicResources,
}

// defaultProfile is the scheduler's default profile (v1 defaults, pkg/scheduler/apis/config/v1) with the
// plugins of outOfScope disabled.
func defaultProfile() (*config.KubeSchedulerProfile, error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, err
	}
	profile := cfg.Profiles[0]
	left := sets.New(outOfScope...)
	plugins := profile.Plugins.DeepCopy()
	plugins.MultiPoint.Enabled = slices.DeleteFunc(plugins.MultiPoint.Enabled, func(p config.Plugin) bool { return left.Has(p.Name) })
	profile.Plugins = plugins
	profile.PluginConfig = slices.DeleteFunc(slices.Clone(profile.PluginConfig), func(pc config.PluginConfig) bool { return left.Has(pc.Name) })
	return &profile, nil
}

func decode(line []byte) (*Case, error) {
	var c Case
	if err := json.Unmarshal(line, &c); err != nil {
		return nil, fmt.Errorf("decoding case: %w", err)
	}
	return &c, nil
}

func objects(c *Case) []runtime.Object {
	var objs []runtime.Object
	for i := range c.Nodes {
		objs = append(objs, &c.Nodes[i])
	}
	for i := range c.Pods {
		objs = append(objs, &c.Pods[i])
	}
	for i := range c.Namespaces {
		objs = append(objs, &c.Namespaces[i])
	}
	for i := range c.Claims {
		objs = append(objs, &c.Claims[i])
	}
	for i := range c.Volumes {
		objs = append(objs, &c.Volumes[i])
	}
	for i := range c.StorageClasses {
		objs = append(objs, &c.StorageClasses[i])
	}
	return objs
}

func verdict(s *fwk.Status) *Verdict {
	if s == nil {
		return &Verdict{Code: fwk.Success.String()}
	}
	return &Verdict{Code: s.Code().String(), Plugin: s.Plugin(), Reasons: s.Reasons()}
}

func judge(line []byte) (any, error) {
	c, err := decode(line)
	if err != nil {
		return nil, err
	}
	return schedule(c)
}

// schedule runs one scheduling cycle's PreEnqueue, PreFilter, Filter, PreScore and Score for c.Pod.
func schedule(c *Case) (*Answer, error) {
	metrics.Register() // the framework records into the scheduler's metrics (registered once)
	profile, err := defaultProfile()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	client := fake.NewClientset(objects(c)...)
	factory := informers.NewSharedInformerFactory(client, 0)
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	pods := make([]*v1.Pod, len(c.Pods))
	for i := range c.Pods {
		pods[i] = &c.Pods[i]
	}
	nodes := make([]*v1.Node, len(c.Nodes))
	for i := range c.Nodes {
		nodes[i] = &c.Nodes[i]
	}
	snapshot := internalcache.NewSnapshot(pods, nodes)
	f, err := frameworkruntime.NewFramework(ctx, plugins.NewInTreeRegistry(), profile,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithMutableSnapshotLister(snapshot),
	)
	if err != nil {
		return nil, fmt.Errorf("building the framework: %w", err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	pod := &c.Pod
	answer := &Answer{Weights: map[string]int32{}}
	for _, pl := range f.PreEnqueuePlugins() {
		if s := pl.PreEnqueue(ctx, pod); !s.IsSuccess() {
			s.SetPlugin(pl.Name())
			answer.PreEnqueue = verdict(s)
			return answer, nil
		}
	}
	state := framework.NewCycleState()
	preRes, s, unscheduledPlugins := f.RunPreFilterPlugins(ctx, state, pod)
	if !s.IsSuccess() {
		if !s.IsRejected() {
			return nil, s.AsError()
		}
		answer.PreFilter = verdict(s)
		return answer, nil
	}
	all, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	answer.Nodes = map[string]Verdict{}
	var feasible []fwk.NodeInfo
	for _, info := range all {
		name := info.Node().Name
		if !preRes.AllNodes() && !preRes.NodeNames.Has(name) {
			// findNodesThatFitPod: nodes a PreFilterResult leaves out.
			answer.Nodes[name] = *verdict(fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("node(s) didn't satisfy plugin(s) %v", sets.List(unscheduledPlugins))))
			continue
		}
		status := f.RunFilterPlugins(ctx, state, pod, info)
		if status.Code() == fwk.Error {
			return nil, status.AsError()
		}
		answer.Nodes[name] = *verdict(status)
		if status.IsSuccess() {
			feasible = append(feasible, info)
		}
	}
	if len(feasible) == 0 {
		return answer, nil
	}
	if s := f.RunPreScorePlugins(ctx, state, pod, feasible); !s.IsSuccess() {
		answer.ScoreError = s.Message()
		return answer, nil
	}
	scored, s := f.RunScorePlugins(ctx, state, pod, feasible)
	if !s.IsSuccess() {
		answer.ScoreError = s.Message()
		return answer, nil
	}
	weights := map[string]int32{}
	for _, p := range profile.Plugins.MultiPoint.Enabled {
		if p.Weight != 0 {
			weights[p.Name] = p.Weight
		}
	}
	answer.Scores = map[string]Scores{}
	for _, node := range scored {
		one := Scores{Plugins: map[string]int64{}, Total: node.TotalScore}
		for _, ps := range node.Scores {
			w := int64(weights[ps.Name])
			if w == 0 {
				w = 1
			}
			one.Plugins[ps.Name] = ps.Score / w
			answer.Weights[ps.Name] = int32(w)
		}
		answer.Scores[node.Name] = one
	}
	return answer, nil
}
