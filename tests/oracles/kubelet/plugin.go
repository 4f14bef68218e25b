package main

import (
	"context"
	"errors"
	"sort"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// devicePlugin is a registered device plugin answered in process (plugin.DevicePlugin): the device manager
// calls its API as it would call the plugin's gRPC server. Its Allocate accepts any devices, as a plugin whose
// devices need no setup. It offers GetPreferredAllocation, preferring devices by NUMA node (lowest first, those
// without one last), then by id: without a preference the device manager takes a part of a larger set in Go
// map order, a new draw on every run, and the same case could be answered two ways.
type devicePlugin struct {
	resource string
	socket   string
	devices  []*pluginapi.Device
}

func (p *devicePlugin) API() pluginapi.DevicePluginClient { return pluginClient{p} }
func (p *devicePlugin) Resource() string                  { return p.resource }
func (p *devicePlugin) SocketPath() string                { return p.socket }

type pluginClient struct{ plugin *devicePlugin }

func (pluginClient) GetDevicePluginOptions(context.Context, *pluginapi.Empty, ...grpc.CallOption) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

func (pluginClient) ListAndWatch(context.Context, *pluginapi.Empty, ...grpc.CallOption) (grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse], error) {
	return nil, errors.New("the oracle sends the devices itself (PluginListAndWatchReceiver)")
}

func (c pluginClient) GetPreferredAllocation(_ context.Context, request *pluginapi.PreferredAllocationRequest, _ ...grpc.CallOption) (*pluginapi.PreferredAllocationResponse, error) {
	numa := map[string][]int64{}
	for _, device := range c.plugin.devices {
		if device.Topology != nil {
			for _, node := range device.Topology.Nodes {
				numa[device.ID] = append(numa[device.ID], node.ID)
			}
		}
	}
	response := &pluginapi.PreferredAllocationResponse{}
	for _, container := range request.ContainerRequests {
		chosen := append([]string(nil), container.MustIncludeDeviceIDs...)
		taken := sets.New(chosen...)
		candidates := sets.List(sets.New(container.AvailableDeviceIDs...).Difference(taken))
		sort.SliceStable(candidates, func(i, j int) bool { return lessDevice(numa[candidates[i]], numa[candidates[j]]) })
		for _, id := range candidates {
			if len(chosen) >= int(container.AllocationSize) {
				break
			}
			chosen = append(chosen, id)
		}
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return response, nil
}

// lessDevice orders devices by their NUMA nodes, those without one last.
func lessDevice(a, b []int64) bool {
	if (len(a) == 0) != (len(b) == 0) {
		return len(b) == 0
	}
	for k := 0; k < len(a) && k < len(b); k++ {
		if a[k] != b[k] {
			return a[k] < b[k]
		}
	}
	return len(a) < len(b)
}

func (pluginClient) Allocate(_ context.Context, request *pluginapi.AllocateRequest, _ ...grpc.CallOption) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for range request.ContainerRequests {
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
	}
	return response, nil
}

func (pluginClient) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest, ...grpc.CallOption) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
