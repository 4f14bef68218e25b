package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/cpuset"

	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
)

// Case is one judgement: a node (machine, kubelet configuration, device plugins), the pods its kubelet
// admitted before, in order, and the pod to admit now.
type Case struct {
	Machine       cadvisorapi.MachineInfo                   `json:"machine"`
	Kubelet       kubeletconfigv1beta1.KubeletConfiguration `json:"kubelet"`
	DevicePlugins []DevicePlugin                            `json:"devicePlugins"`
	Pods          []*v1.Pod                                 `json:"pods"`
	Pod           *v1.Pod                                   `json:"pod"`
}

// DevicePlugin is one registered device plugin: its resource and what its ListAndWatch sends.
type DevicePlugin struct {
	Resource string              `json:"resource"`
	Devices  []*pluginapi.Device `json:"devices"`
}

// Answer is the oracle's judgement of a Case.
type Answer struct {
	// Unavailable: a manager refused to start (the kubelet would not run): "<manager>: <error>".
	Unavailable string `json:"unavailable,omitempty"`
	// Steps: one per pod, the earlier pods then the case's pod.
	Steps []Step `json:"steps"`
}

// Step is the admission of one pod.
type Step struct {
	// Node: the managers' state before the pod, once they dropped what earlier rejected pods were given.
	Node *NodeState `json:"node"`
	// Admit, Reason, Message: lifecycle.PodAdmitResult of the pod.
	Admit   bool   `json:"admit"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Panic: the kubelet panicked admitting the pod (the last step then: the kubelet would restart).
	Panic string `json:"panic,omitempty"`
	// ReservedTaken: reserved CPUs the CPU manager gave the pod's containers as exclusive CPUs.
	ReservedTaken int `json:"reservedTaken,omitempty"`
	// Containers: init containers then containers, each with its affinity and what it was given.
	Containers []ContainerAnswer `json:"containers"`
}

// NodeState is what the node reports: per NUMA node, the CPU manager's and the memory manager's view.
type NodeState struct {
	NUMA    []NUMAState   `json:"numa"`
	Devices []DeviceState `json:"devices"`
}

// NUMAState is one NUMA node.
type NUMAState struct {
	ID int `json:"id"`
	// CPUs: every CPU of the node; Reserved: those in the reserved set; Free: the CPU manager's default
	// set less the reserved CPUs (the static policy's GetAvailableCPUs).
	CPUs     int `json:"cpus"`
	Reserved int `json:"reserved"`
	Free     int `json:"free"`
	// Memory: the memory manager's machine state per resource (Static policy only).
	Memory      map[string]MemoryState `json:"memory,omitempty"`
	Cells       []int                  `json:"cells,omitempty"`
	Assignments int                    `json:"assignments"`
}

// MemoryState is a MemoryTable in bytes.
type MemoryState struct {
	Total       uint64 `json:"total"`
	Reserved    uint64 `json:"systemReserved"`
	Allocatable uint64 `json:"allocatable"`
	Assigned    uint64 `json:"reserved"`
	Free        uint64 `json:"free"`
}

// DeviceState is one device as the device manager holds it.
type DeviceState struct {
	Resource string  `json:"resource"`
	ID       string  `json:"id"`
	NUMA     []int64 `json:"numa"`
	Healthy  bool    `json:"healthy"`
	InUse    bool    `json:"inUse"`
}

// ContainerAnswer is one container of the admitted pod.
type ContainerAnswer struct {
	Name string `json:"name"`
	// Affinity: the Topology Manager's hint (GetAffinity); nil is "any NUMA node".
	Affinity  []int `json:"affinity"`
	Preferred bool  `json:"preferred"`
	// CPUs: exclusive CPUs per NUMA node; Memory: the memory manager's blocks; Devices: ids per resource.
	CPUs    map[int]int         `json:"cpus,omitempty"`
	Memory  []MemoryBlock       `json:"memory,omitempty"`
	Devices map[string][]string `json:"devices,omitempty"`
}

// MemoryBlock is a memory manager state.Block.
type MemoryBlock struct {
	NUMA []int  `json:"numa"`
	Type string `json:"type"`
	Size uint64 `json:"size"`
}

var cases int

func decodeCase(line []byte) (*Case, error) {
	var c Case
	if err := json.Unmarshal(line, &c); err != nil {
		return nil, fmt.Errorf("bad case: %w", err)
	}
	if c.Pod == nil {
		return nil, fmt.Errorf("bad case: no pod")
	}
	// Unique pod UIDs: the device manager's checkpoint outlives a case (see deviceCheckpoint).
	cases++
	for i, pod := range c.Pods {
		if pod == nil {
			return nil, fmt.Errorf("bad case: pods[%d] is null", i)
		}
		pod.UID = types.UID(fmt.Sprintf("%d-%d-earlier-%d", os.Getpid(), cases, i))
	}
	c.Pod.UID = types.UID(fmt.Sprintf("%d-%d-incoming", os.Getpid(), cases))
	k := &c.Kubelet
	if k.TopologyManagerPolicy == "" {
		k.TopologyManagerPolicy = "none"
	}
	if k.TopologyManagerScope == "" {
		k.TopologyManagerScope = "container"
	}
	if k.CPUManagerPolicy == "" {
		k.CPUManagerPolicy = "none"
	}
	if k.MemoryManagerPolicy == "" {
		k.MemoryManagerPolicy = "None"
	}
	return &c, nil
}

// reservation is GetNodeAllocatableReservation without eviction thresholds: systemReserved + kubeReserved.
func reservation(k *kubeletconfigv1beta1.KubeletConfiguration) (v1.ResourceList, error) {
	result := v1.ResourceList{}
	for _, reserved := range []map[string]string{k.SystemReserved, k.KubeReserved} {
		names := make([]string, 0, len(reserved))
		for name := range reserved {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			quantity, err := resource.ParseQuantity(reserved[name])
			if err != nil {
				return nil, fmt.Errorf("bad reservation %s=%q: %w", name, reserved[name], err)
			}
			total := result[v1.ResourceName(name)]
			total.Add(quantity)
			result[v1.ResourceName(name)] = total
		}
	}
	for name, quantity := range result {
		if quantity.IsZero() {
			delete(result, name)
		}
	}
	return result, nil
}

func reservedMemory(k *kubeletconfigv1beta1.KubeletConfiguration) []kubeletconfig.MemoryReservation {
	var out []kubeletconfig.MemoryReservation
	for _, r := range k.ReservedMemory {
		out = append(out, kubeletconfig.MemoryReservation{NumaNode: r.NumaNode, Limits: r.Limits})
	}
	return out
}

func reservedCPUs(k *kubeletconfigv1beta1.KubeletConfiguration) (cpuset.CPUSet, error) {
	if k.ReservedSystemCPUs == "" {
		return cpuset.New(), nil
	}
	set, err := cpuset.Parse(k.ReservedSystemCPUs)
	if err != nil {
		return cpuset.New(), fmt.Errorf("bad reservedSystemCPUs %q: %w", k.ReservedSystemCPUs, err)
	}
	return set, nil
}
