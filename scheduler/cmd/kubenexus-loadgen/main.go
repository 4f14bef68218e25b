// Command kubenexus-loadgen drives a placement service as kube-scheduler drives the KubeNexus plugin, for
// benchmarks/placement_service.py: the plugin's own code, one pod at a time.
//
// Per pod, what a scheduling cycle asks of the plugin: PreFilter (the Score RPC), Filter and Score on every
// node PreFilter kept, the highest score (ties to the first name, for a repeatable run), then Reserve (the
// Reserve RPC). That span is timed: the plugin's share of one pod's scheduling cycle, the default install's
// decision. Then the plugin's Unreserve, outside the timing, gives the reservation back, so that the cluster
// holds still apart from the benchmark's own churn.
//
// It prints one JSON object: the milliseconds of every timed pod, and of its PreFilter and Reserve alone.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"kubenexus.io/scheduler/pkg/kubenexus"
)

// timings are the milliseconds of each timed pod, in order.
type timings struct {
	Decision  []float64 `json:"decision_ms"`
	PreFilter []float64 `json:"prefilter_ms"`
	Reserve   []float64 `json:"reserve_ms"`
}

// scheduler is what a scheduling cycle calls on the plugin: kubenexus.Plugin's extension points.
type scheduler interface {
	fwk.PreFilterPlugin
	fwk.FilterPlugin
	fwk.ScorePlugin
	fwk.ReservePlugin
}

// cycle is one pod's scheduling cycle on the plugin; it returns the node reserved and when PreFilter ended.
func cycle(ctx context.Context, plugin scheduler, nodes *nodeInfos, state fwk.CycleState, pod *v1.Pod) (string, time.Time, error) {
	result, status := plugin.PreFilter(ctx, state, pod, nil)
	preFiltered := time.Now()
	if !status.IsSuccess() {
		return "", preFiltered, fmt.Errorf("PreFilter: %s", status.Message())
	}
	best, bestScore := "", int64(-1)
	for _, name := range result.NodeNames.UnsortedList() {
		node := nodes.get(name)
		if status := plugin.Filter(ctx, state, pod, node); !status.IsSuccess() {
			continue
		}
		score, status := plugin.Score(ctx, state, pod, node)
		if !status.IsSuccess() {
			return "", preFiltered, fmt.Errorf("Score %s: %s", name, status.Message())
		}
		if score > bestScore || (score == bestScore && name < best) {
			best, bestScore = name, score
		}
	}
	if best == "" {
		return "", preFiltered, fmt.Errorf("no node passed Filter of the %d PreFilter kept", result.NodeNames.Len())
	}
	if status := plugin.Reserve(ctx, state, pod, best); !status.IsSuccess() {
		return "", preFiltered, fmt.Errorf("Reserve %s: %s", best, status.Message())
	}
	return best, preFiltered, nil
}

// run schedules warmUp + decisions pods one after another, timing those after the warm-up.
func run(ctx context.Context, plugin scheduler, warmUp, decisions int) (timings, error) {
	nodes := &nodeInfos{byName: map[string]fwk.NodeInfo{}}
	var out timings
	for i := 0; i < warmUp+decisions; i++ {
		pod := benchmarkPod(fmt.Sprintf("trainer-%d", i))
		state := framework.NewCycleState()
		started := time.Now()
		node, preFiltered, err := cycle(ctx, plugin, nodes, state, pod)
		if err != nil {
			return timings{}, fmt.Errorf("pod %d: %w", i, err)
		}
		reserved := time.Now()
		plugin.Unreserve(ctx, state, pod, node)
		if i >= warmUp {
			out.Decision = append(out.Decision, milliseconds(reserved.Sub(started)))
			out.PreFilter = append(out.PreFilter, milliseconds(preFiltered.Sub(started)))
			out.Reserve = append(out.Reserve, milliseconds(reserved.Sub(preFiltered)))
		}
	}
	return out, nil
}

func milliseconds(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// nodeInfos are kube-scheduler's NodeInfo of the nodes PreFilter names, made once each.
type nodeInfos struct{ byName map[string]fwk.NodeInfo }

func (n *nodeInfos) get(name string) fwk.NodeInfo {
	info, ok := n.byName[name]
	if !ok {
		made := framework.NewNodeInfo()
		made.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		info = made
		n.byName[name] = info
	}
	return info
}

// newPlugin is the KubeNexus plugin as kube-scheduler makes it from a profile's args: the service's address
// and the per-call timeout, the rest defaulted.
func newPlugin(ctx context.Context, address string, timeout time.Duration) (*kubenexus.Plugin, error) {
	raw, err := json.Marshal(map[string]string{"address": address, "timeout": timeout.String()})
	if err != nil {
		return nil, err
	}
	made, err := kubenexus.New(ctx, &runtime.Unknown{Raw: raw}, nil)
	if err != nil {
		return nil, err
	}
	return made.(*kubenexus.Plugin), nil
}

func main() {
	address := flag.String("address", "", "the placement service's gRPC address (host:port)")
	decisions := flag.Int("decisions", 1000, "pods timed")
	warmUp := flag.Int("warm-up", 50, "pods scheduled first, untimed")
	timeout := flag.Duration("timeout", 10*time.Second, "the plugin's per-call timeout (its args' timeout)")
	flag.Parse()
	if *address == "" || *decisions < 1 || *warmUp < 0 {
		fmt.Fprintln(os.Stderr, "kubenexus-loadgen: -address is required, -decisions at least 1, -warm-up not negative")
		os.Exit(2)
	}
	ctx := context.Background()
	plugin, err := newPlugin(ctx, *address, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubenexus-loadgen:", err)
		os.Exit(2)
	}
	out, err := run(ctx, plugin, *warmUp, *decisions)
	_ = plugin.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubenexus-loadgen:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "kubenexus-loadgen:", err)
		os.Exit(1)
	}
}
