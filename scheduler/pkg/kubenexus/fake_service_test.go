package kubenexus

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// fakeService is the placement service's gRPC API on a real loopback socket, answering from its fields and
// recording what it was asked.
type fakeService struct {
	placementv1.UnimplementedPlacementServer

	mu         sync.Mutex
	score      *placementv1.ScoreResponse
	reserve    *placementv1.ReserveResponse
	permit     map[string]*placementv1.PermitStatusResponse   // by pod name
	permitted  map[string][]*placementv1.PermitStatusResponse // by pod name: answered in turn before `permit`
	preempt    *placementv1.PreemptResponse
	preempts   []*placementv1.PreemptRequest
	placeGang  *placementv1.PlaceGangResponse
	gangCalls  []*placementv1.PlaceGangRequest
	reserves   int
	err        error // returned by every RPC when set
	scoreCalls []*placementv1.ScoreRequest
	unreserved []string
}

func (f *fakeService) Score(_ context.Context, request *placementv1.ScoreRequest) (*placementv1.ScoreResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scoreCalls = append(f.scoreCalls, request)
	return f.score, f.err
}

func (f *fakeService) Reserve(context.Context, *placementv1.ReserveRequest) (*placementv1.ReserveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reserves++
	return f.reserve, f.err
}

func (f *fakeService) PlaceGang(_ context.Context, request *placementv1.PlaceGangRequest) (*placementv1.PlaceGangResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gangCalls = append(f.gangCalls, request)
	return f.placeGang, f.err
}

func (f *fakeService) Unreserve(_ context.Context, request *placementv1.UnreserveRequest) (*placementv1.UnreserveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreserved = append(f.unreserved, request.GetPod().GetName())
	return &placementv1.UnreserveResponse{Released: true}, f.err
}

func (f *fakeService) Preempt(_ context.Context, request *placementv1.PreemptRequest) (*placementv1.PreemptResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.preempts = append(f.preempts, request)
	return f.preempt, f.err
}

func (f *fakeService) PermitStatus(_ context.Context, request *placementv1.PermitStatusRequest) (*placementv1.PermitStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if queued := f.permitted[request.GetPod().GetName()]; len(queued) > 0 {
		f.permitted[request.GetPod().GetName()] = queued[1:]
		return queued[0], nil
	}
	if answer, ok := f.permit[request.GetPod().GetName()]; ok {
		return answer, nil
	}
	return nil, status.Error(codes.NotFound, "no such pod")
}

// serve starts the fake on 127.0.0.1 and returns the plugin args that reach it.
func serve(t *testing.T, service *fakeService, policy string) *Args {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	placementv1.RegisterPlacementServer(server, service)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	return &Args{
		Address: listener.Addr().String(), FailurePolicy: policy,
		Timeout: duration(defaultTimeout), PermitTimeout: duration(defaultPermitTimeout),
	}
}

func duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }
