package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
	"kubenexus.io/scheduler/pkg/kubenexus"
)

// service is the placement service's gRPC API on a loopback socket: Score answers `nodes` with `scores`,
// Reserve reserves unless `refuse`; it records the calls in order.
type service struct {
	placementv1.UnimplementedPlacementServer

	nodes  []string
	scores []float64
	refuse bool

	mu    sync.Mutex
	calls []string // "Score <pod>", "Reserve <pod> <node>", "Unreserve <pod>"
	pods  []string // the pod JSON of every Score
}

func (s *service) Score(_ context.Context, request *placementv1.ScoreRequest) (*placementv1.ScoreResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = append(s.pods, request.GetPodJson())
	s.calls = append(s.calls, "Score "+podName(request.GetPodJson()))
	return &placementv1.ScoreResponse{Nodes: s.nodes, Scores: s.scores}, nil
}

func (s *service) Reserve(_ context.Context, request *placementv1.ReserveRequest) (*placementv1.ReserveResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "Reserve "+podName(request.GetPodJson())+" "+strings.Join(request.GetNodeNames(), ","))
	if s.refuse {
		return &placementv1.ReserveResponse{Rejected: []*placementv1.Rejections{{Reason: "taken meanwhile"}}}, nil
	}
	return &placementv1.ReserveResponse{Reserved: true, Placement: &placementv1.PodPlacement{Node: request.GetNodeNames()[0]}}, nil
}

func (s *service) Unreserve(_ context.Context, request *placementv1.UnreserveRequest) (*placementv1.UnreserveResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "Unreserve "+request.GetPod().GetName())
	return &placementv1.UnreserveResponse{Released: true}, nil
}

func podName(body string) string {
	var pod struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(body), &pod); err != nil {
		return "unreadable"
	}
	return pod.Metadata.Name
}

// serve starts s on 127.0.0.1 and returns the KubeNexus plugin connected to it, as kubenexus-loadgen makes it.
func serve(t *testing.T, s *service) *kubenexus.Plugin {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	placementv1.RegisterPlacementServer(server, s)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	plugin, err := newPlugin(context.Background(), listener.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plugin.Close() })
	return plugin
}

func TestRunSchedulesEachPodAsACycleDoes(t *testing.T) {
	tests := []struct {
		name      string
		nodes     []string
		scores    []float64
		refuse    bool
		warmUp    int
		decisions int
		wantNode  string // where every pod is reserved
		wantErr   string
	}{
		{name: "the highest score", nodes: []string{"n1", "n2", "n3"}, scores: []float64{40, 90, 70}, warmUp: 1, decisions: 3, wantNode: "n2"},
		{name: "ties to the first name", nodes: []string{"n3", "n2", "n1"}, scores: []float64{80, 80, 10}, decisions: 2, wantNode: "n2"},
		{name: "no feasible node", nodes: nil, scores: nil, decisions: 1, wantErr: "pod 0: PreFilter"},
		{name: "Reserve refused", nodes: []string{"n1"}, scores: []float64{50}, refuse: true, decisions: 1, wantErr: "pod 0: Reserve n1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &service{nodes: tc.nodes, scores: tc.scores, refuse: tc.refuse}
			out, err := run(context.Background(), serve(t, s), tc.warmUp, tc.decisions)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("run: err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, series := range [][]float64{out.Decision, out.PreFilter, out.Reserve} {
				if len(series) != tc.decisions {
					t.Fatalf("timed %d pods, want %d (the warm-up's %d left out)", len(series), tc.decisions, tc.warmUp)
				}
			}
			for i := range out.Decision {
				if out.PreFilter[i] <= 0 || out.Reserve[i] <= 0 || out.Decision[i] < out.PreFilter[i]+out.Reserve[i]-1e-9 {
					t.Fatalf("pod %d: decision %.3f ms is not PreFilter %.3f + Reserve %.3f", i, out.Decision[i], out.PreFilter[i], out.Reserve[i])
				}
			}
			var want []string
			for i := 0; i < tc.warmUp+tc.decisions; i++ {
				pod := fmt.Sprintf("trainer-%d", i)
				want = append(want, "Score "+pod, "Reserve "+pod+" "+tc.wantNode, "Unreserve "+pod)
			}
			if strings.Join(s.calls, "; ") != strings.Join(want, "; ") {
				t.Fatalf("calls:\n  %s\nwant:\n  %s", strings.Join(s.calls, "; "), strings.Join(want, "; "))
			}
		})
	}
}

func TestThePodIsOneTheAPIServerWouldHandOver(t *testing.T) {
	s := &service{nodes: []string{"n1"}, scores: []float64{50}}
	if _, err := run(context.Background(), serve(t, s), 0, 1); err != nil {
		t.Fatal(err)
	}
	var pod map[string]any
	if err := json.Unmarshal([]byte(s.pods[0]), &pod); err != nil {
		t.Fatal(err)
	}
	spec := pod["spec"].(map[string]any)
	requests := spec["containers"].([]any)[0].(map[string]any)["resources"].(map[string]any)["requests"].(map[string]any)
	if requests["nvidia.com/gpu"] != "4" || requests["cpu"] != "24" || requests["memory"] != "256Gi" {
		t.Fatalf("requests %v, want benchmarks/placement_service.py's GPU pod", requests)
	}
	if len(spec["tolerations"].([]any)) != 2 || len(spec["volumes"].([]any)) != 1 || spec["schedulerName"] != "kubenexus-scheduler" {
		t.Fatalf("spec %v lacks what defaulting and admission add", spec)
	}
}
