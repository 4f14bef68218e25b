package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// reconcilePeriod: the CPU manager's reconcile loop runs once as it starts (it finds no running container
// to update: noStatus) and never again while the oracle lives. Its goroutine never stops (wait.NeverStop):
// one per case that configures the static policy stays asleep.
const reconcilePeriod = 24 * time.Hour

// deviceCheckpoint is the device manager's checkpoint: NewManagerImpl always keeps it (and its registration
// socket) in /var/lib/kubelet/device-plugins, and Start restores it.
var deviceCheckpoint = filepath.Join(filepath.Dir(pluginapi.KubeletSocket), "kubelet_internal_checkpoint")

// node is one kubelet's resource managers, wired as container_manager_linux.go wires them.
type node struct {
	topology topologymanager.Manager
	devices  *devicemanager.ManagerImpl
	cpus     cpumanager.Manager
	memory   memorymanager.Manager

	mutex  sync.Mutex
	active []*v1.Pod // the kubelet's active pods: those admitted, and the one being admitted
	// reconciled is closed once the CPU manager's reconcile loop has listed the active pods twice: its first
	// run, which starts with Start, is over (see awaitReconcile).
	asked      int
	reconciled chan struct{}
}

func (n *node) activePods() []*v1.Pod {
	n.mutex.Lock()
	defer n.mutex.Unlock()
	n.asked++
	if n.asked == 2 {
		close(n.reconciled)
	}
	return append([]*v1.Pod(nil), n.active...)
}

// awaitReconcile waits out the first run of the static CPU manager's reconcile loop, which Start begins in a
// goroutine: it lists the active pods in removeStaleState and again to reconcile them (none yet, nothing to
// do). Running alongside the admissions, it would read and write the policy's state with them (a fatal
// concurrent map access) whenever it finds something stale.
func (n *node) awaitReconcile() error {
	select {
	case <-n.reconciled:
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("the CPU manager's reconcile loop did not run")
	}
}

func (n *node) setActive(pods []*v1.Pod) {
	n.mutex.Lock()
	defer n.mutex.Unlock()
	n.active = pods
}

type sourcesReady struct{}

// noStatus is the pod status provider: no container of any pod has started yet.
type noStatus struct{}

func (noStatus) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

// newNode starts the managers in dir; a manager that refuses to start is named in the error.
func newNode(ctx context.Context, c *Case, dir string) (*node, string, error) {
	logger := klog.FromContext(ctx)
	k := &c.Kubelet
	reserved, err := reservation(k)
	if err != nil {
		return nil, "", err
	}
	specificCPUs, err := reservedCPUs(k)
	if err != nil {
		return nil, "", err
	}
	if specificCPUs.Size() > 0 {
		// The kubelet's reservedSystemCPUs overrides the CPU of systemReserved and kubeReserved
		// (cmd/kubelet/app/server.go: the reservation becomes the set's size).
		reserved[v1.ResourceCPU] = *resource.NewQuantity(int64(specificCPUs.Size()), resource.DecimalSI)
	}
	n := &node{reconciled: make(chan struct{})}
	n.topology, err = topologymanager.NewManager(logger, c.Machine.Topology, k.TopologyManagerPolicy, k.TopologyManagerScope, k.TopologyManagerPolicyOptions)
	if err != nil {
		return nil, fmt.Sprintf("topologymanager: %v", err), nil
	}
	n.devices, err = devicemanager.NewManagerImpl(logger, c.Machine.Topology, n.topology)
	if err != nil {
		return nil, "", err
	}
	n.topology.AddHintProvider(logger, n.devices)
	n.cpus, err = cpumanager.NewManager(logger, k.CPUManagerPolicy, k.CPUManagerPolicyOptions, reconcilePeriod, &c.Machine, specificCPUs, reserved, dir, n.topology)
	if err != nil {
		return nil, fmt.Sprintf("cpumanager: %v", err), nil
	}
	n.topology.AddHintProvider(logger, n.cpus)
	n.memory, err = memorymanager.NewManager(logger, k.MemoryManagerPolicy, &c.Machine, reserved, reservedMemory(k), dir, n.topology)
	if err != nil {
		return nil, fmt.Sprintf("memorymanager: %v", err), nil
	}
	n.topology.AddHintProvider(logger, n.memory)

	// Another case's checkpoint holds pods this one would restore; what a concurrent oracle leaves there
	// belongs to no pod of this case (pod UIDs are unique per case and process) and is dropped as stale.
	if err := os.Remove(deviceCheckpoint); err != nil && !os.IsNotExist(err) {
		return nil, "", err
	}
	if err := n.devices.Start(logger, n.activePods, sourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, "", fmt.Errorf("devicemanager start: %w", err)
	}
	for _, plugin := range c.DevicePlugins {
		if err := n.devices.PluginConnected(ctx, plugin.Resource, &devicePlugin{resource: plugin.Resource, socket: filepath.Join(dir, plugin.Resource), devices: plugin.Devices}); err != nil {
			return nil, "", fmt.Errorf("device plugin %s: %w", plugin.Resource, err)
		}
		n.devices.PluginListAndWatchReceiver(logger, plugin.Resource, &pluginapi.ListAndWatchResponse{Devices: plugin.Devices})
	}
	if err := n.cpus.Start(ctx, n.activePods, sourcesReady{}, noStatus{}, nil, containermap.NewContainerMap()); err != nil {
		return nil, fmt.Sprintf("cpumanager: %v", err), nil
	}
	if k.CPUManagerPolicy == string(cpumanager.PolicyStatic) {
		if err := n.awaitReconcile(); err != nil {
			return nil, "", err
		}
	}
	if err := n.memory.Start(ctx, n.activePods, sourcesReady{}, nil, nil, containermap.NewContainerMap()); err != nil {
		return nil, fmt.Sprintf("memorymanager: %v", err), nil
	}
	return n, "", nil
}

// admit is the kubelet's admission of pod by the Topology Manager (which allocates as it admits); a
// rejected pod leaves the active pods, and the managers drop what it got on their next call.
func (n *node) admit(ctx context.Context, pod *v1.Pod) lifecycle.PodAdmitResult {
	before := n.activePods()
	n.setActive(append(before, pod))
	result := n.topology.Admit(ctx, &lifecycle.PodAdmitAttributes{Pod: pod, Operation: lifecycle.AddOperation})
	if !result.Admit {
		n.setActive(before)
	}
	return result
}

// admitRecovering is admit, with a panic's text instead of the kubelet's crash.
func (n *node) admitRecovering(ctx context.Context, pod *v1.Pod) (result lifecycle.PodAdmitResult, panicked string) {
	defer func() {
		if recovered := recover(); recovered != nil {
			panicked = fmt.Sprint(recovered)
		}
	}()
	return n.admit(ctx, pod), ""
}

// start is the kubelet starting an admitted pod's containers, init containers first.
func (n *node) start(logger klog.Logger, pod *v1.Pod) {
	for i, container := range allContainers(pod) {
		id := fmt.Sprintf("%s-%d", pod.UID, i)
		n.cpus.AddContainer(logger, pod, &container, id)
		n.memory.AddContainer(logger, pod, &container, id)
		n.topology.AddContainer(logger, pod, &container, id)
	}
}

func allContainers(pod *v1.Pod) []v1.Container {
	return append(append([]v1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
}

func (n *node) state(c *Case) *NodeState {
	out := &NodeState{}
	allocatable := n.cpus.GetAllocatableCPUs()
	free := n.cpus.State().GetDefaultCPUSet().Intersection(allocatable)
	machine := n.memory.State().GetMachineState()
	for _, numa := range c.Machine.Topology {
		state := NUMAState{ID: numa.Id}
		for _, core := range numa.Cores {
			for _, cpu := range core.Threads {
				state.CPUs++
				if !allocatable.Contains(cpu) {
					state.Reserved++
				}
				if free.Contains(cpu) {
					state.Free++
				}
			}
		}
		if memory, ok := machine[numa.Id]; ok {
			state.Memory = map[string]MemoryState{}
			for name, table := range memory.MemoryMap {
				state.Memory[string(name)] = MemoryState{
					Total: table.TotalMemSize, Reserved: table.SystemReserved, Allocatable: table.Allocatable,
					Assigned: table.Reserved, Free: table.Free,
				}
			}
			state.Cells = append([]int(nil), memory.Cells...)
			state.Assignments = memory.NumberOfAssignments
		}
		out.NUMA = append(out.NUMA, state)
	}
	inUse := sets.New[string]()
	for _, pod := range n.activePods() {
		for _, container := range allContainers(pod) {
			for resourceName, devices := range n.devices.GetDevices(string(pod.UID), container.Name) {
				for id := range devices {
					inUse.Insert(resourceName + "/" + id)
				}
			}
		}
	}
	for _, plugin := range c.DevicePlugins {
		for _, device := range plugin.Devices {
			var numa []int64
			if device.Topology != nil {
				for _, node := range device.Topology.Nodes {
					numa = append(numa, node.ID)
				}
			}
			out.Devices = append(out.Devices, DeviceState{
				Resource: plugin.Resource, ID: device.ID, NUMA: numa,
				Healthy: device.Health == pluginapi.Healthy, InUse: inUse.Has(plugin.Resource + "/" + device.ID),
			})
		}
	}
	return out
}

func (n *node) containers(logger klog.Logger, c *Case, pod *v1.Pod) []ContainerAnswer {
	numaOf := map[int]int{}
	for _, numa := range c.Machine.Topology {
		for _, core := range numa.Cores {
			for _, cpu := range core.Threads {
				numaOf[cpu] = numa.Id
			}
		}
	}
	uid := string(pod.UID)
	var out []ContainerAnswer
	for _, container := range allContainers(pod) {
		hint := n.topology.GetAffinity(logger, uid, container.Name)
		answer := ContainerAnswer{Name: container.Name, Preferred: hint.Preferred}
		if hint.NUMANodeAffinity != nil {
			answer.Affinity = hint.NUMANodeAffinity.GetBits()
		}
		if cpus, ok := n.cpus.State().GetCPUSet(uid, container.Name); ok && cpus.Size() > 0 {
			answer.CPUs = map[int]int{}
			for _, cpu := range cpus.List() {
				answer.CPUs[numaOf[cpu]]++
			}
		}
		for _, block := range n.memory.GetMemory(logger, uid, container.Name) {
			answer.Memory = append(answer.Memory, MemoryBlock{NUMA: block.NUMAAffinity, Type: string(block.Type), Size: block.Size})
		}
		for resourceName, devices := range n.devices.GetDevices(uid, container.Name) {
			if answer.Devices == nil {
				answer.Devices = map[string][]string{}
			}
			for id := range devices {
				answer.Devices[resourceName] = append(answer.Devices[resourceName], id)
			}
			sort.Strings(answer.Devices[resourceName])
		}
		out = append(out, answer)
	}
	return out
}

// reservedTaken counts the reserved CPUs among the pod's exclusive CPUs.
func (n *node) reservedTaken(pod *v1.Pod) int {
	reserved := n.cpus.GetAllCPUs().Difference(n.cpus.GetAllocatableCPUs())
	taken := 0
	for _, cpus := range n.cpus.State().GetCPUAssignments()[string(pod.UID)] {
		taken += cpus.Intersection(reserved).Size()
	}
	return taken
}

// settle drops what pods no longer active hold, as each manager does first on its next call (removeStaleState,
// UpdateAllocatedDevices): the state the node reports, and the next pod meets.
func (n *node) settle(logger klog.Logger) {
	nobody := &v1.Pod{}
	nobody.Spec.Containers = []v1.Container{{Name: "settle"}}
	n.cpus.GetTopologyHints(logger, nobody, &nobody.Spec.Containers[0], lifecycle.AddOperation)
	n.memory.GetTopologyHints(logger, nobody, &nobody.Spec.Containers[0], lifecycle.AddOperation)
	n.devices.UpdateAllocatedDevices(logger)
}

func judge(base string, line []byte) (any, error) {
	c, err := decodeCase(line)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, "case-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	logger := logr.Discard()
	ctx := klog.NewContext(context.Background(), logger)
	n, unavailable, err := newNode(ctx, c, dir)
	if err != nil {
		return nil, err
	}
	if unavailable != "" {
		return Answer{Unavailable: unavailable, Steps: []Step{}}, nil
	}
	defer func() { _ = n.devices.Stop(logger) }()
	answer := Answer{Steps: []Step{}}
	for _, pod := range append(append([]*v1.Pod(nil), c.Pods...), c.Pod) {
		n.settle(logger)
		step := Step{Node: n.state(c)}
		result, panicked := n.admitRecovering(ctx, pod)
		if panicked != "" {
			step.Panic = panicked
			answer.Steps = append(answer.Steps, step)
			break
		}
		step.Admit, step.Reason, step.Message = result.Admit, result.Reason, result.Message
		step.Containers = n.containers(logger, c, pod)
		step.ReservedTaken = n.reservedTaken(pod)
		if result.Admit {
			n.start(logger, pod)
		}
		answer.Steps = append(answer.Steps, step)
	}
	return answer, nil
}
