package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// Case is one allocation question: the cluster's DRA objects, the node and the claims of one pod.
type Case struct {
	Features   map[string]bool             `json:"features"`
	Allocators []string                    `json:"allocators"`
	Stored     bool                        `json:"stored"`
	Node       v1.Node                     `json:"node"`
	Slices     []resourceapi.ResourceSlice `json:"slices"`
	Classes    []resourceapi.DeviceClass   `json:"classes"`
	Claims     []resourceapi.ResourceClaim `json:"claims"`
	Allocated  []resourceapi.ResourceClaim `json:"allocated"`
}

// Answer is upstream's verdict on a case.
type Answer struct {
	Allocator string                         `json:"allocator"`
	Outcome   string                         `json:"outcome"`
	Error     string                         `json:"error,omitempty"`
	NodeOnly  bool                           `json:"nodeOnly,omitempty"`
	Results   []resourceapi.AllocationResult `json:"results,omitempty"`
}

// Features137 are the allocator features kube-scheduler 1.37 enables with default feature gates
// (pkg/features/kube_features.go, dynamicresources.AllocatorFeatures): with them NewAllocator picks
// "incubating".
var Features137 = structured.Features{
	AdminAccess:             true,
	ConsumableCapacity:      true,
	DeviceBindingAndStatus:  true,
	DeviceTaints:            true,
	FractionalCapacityRange: true,
	PartitionableDevices:    true,
	PrioritizedList:         true,
}

// allocateTimeout bounds one Allocate as kube-scheduler's DRASchedulerFilterTimeout (10 s) does.
const allocateTimeout = 10 * time.Second

func judge(line []byte) (*Answer, error) {
	var c Case
	decoder := json.NewDecoder(bytes.NewReader(line))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&c); err != nil {
		return nil, fmt.Errorf("decode case: %w", err)
	}
	features, err := decodeFeatures(c.Features)
	if err != nil {
		return nil, err
	}
	if err := admit(&c, validator(!c.Stored)); err != nil {
		return nil, err
	}
	return allocate(context.Background(), &c, features)
}

// decodeFeatures sets structured.Features' fields by name; nil means Features137.
func decodeFeatures(named map[string]bool) (structured.Features, error) {
	if named == nil {
		return Features137, nil
	}
	var features structured.Features
	value := reflect.ValueOf(&features).Elem()
	for name, on := range named {
		field := value.FieldByName(name)
		if !field.IsValid() || field.Kind() != reflect.Bool {
			return features, fmt.Errorf("unknown allocator feature %q", name)
		}
		field.SetBool(on)
	}
	return features, nil
}

func allocate(ctx context.Context, c *Case, features structured.Features) (*Answer, error) {
	structured.EnableAllocators(c.Allocators...)
	defer structured.EnableAllocators()

	slices := make([]*resourceapi.ResourceSlice, len(c.Slices))
	for i := range c.Slices {
		slices[i] = &c.Slices[i]
	}
	claims := make([]*resourceapi.ResourceClaim, len(c.Claims))
	for i := range c.Claims {
		claims[i] = &c.Claims[i]
	}
	celCache := cel.NewCache(10, cel.Features{
		EnableConsumableCapacity: features.ConsumableCapacity,
		EnableListTypeAttributes: features.ListTypeAttributes,
	})
	state := allocatedState(c.Allocated, features.ConsumableCapacity)
	allocator, err := structured.NewAllocator(ctx, features, state, classLister(c.Classes), slices, celCache)
	if err != nil {
		return nil, fmt.Errorf("NewAllocator: %w", err)
	}
	answer := &Answer{Allocator: channel(allocator)}
	ctx, cancel := context.WithTimeout(ctx, allocateTimeout)
	defer cancel()
	results, err := allocator.Allocate(ctx, &c.Node, claims)
	switch {
	case err != nil:
		answer.Outcome = "error"
		answer.Error = err.Error()
		answer.NodeOnly = errors.Is(err, structured.ErrFailedAllocationOnNode)
	case results == nil:
		answer.Outcome = "unsatisfiable"
	default:
		answer.Outcome = "allocated"
		answer.Results = results
	}
	return answer, nil
}

// channel names the implementation NewAllocator picked ("stable", "incubating", "experimental"); the
// method is on every implementation but its result type is internal to the module.
func channel(allocator structured.Allocator) string {
	method := reflect.ValueOf(allocator).MethodByName("Channel")
	if !method.IsValid() {
		return "unknown"
	}
	return method.Call(nil)[0].String()
}

// allocatedState is what kube-scheduler's claim tracker gathers from the claims' status.allocation
// (dynamicresources/dra_manager.go: GatherAllocatedState, allocateddevices.go: foreachAllocatedDevice):
// admin-access results are not allocated; with consumable capacity a result with a shareID is a shared
// allocation with its consumed capacity, every other one takes the device.
func allocatedState(claims []resourceapi.ResourceClaim, consumableCapacity bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for i := range claims {
		allocation := claims[i].Status.Allocation
		if allocation == nil {
			continue
		}
		for _, result := range allocation.Devices.Results {
			if ptr.Deref(result.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if consumableCapacity && result.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, result.ShareID))
				if result.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// classLister serves DeviceClasses by name, answering NotFound as the informer's lister does.
type classLister []resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	classes := make([]*resourceapi.DeviceClass, len(l))
	for i := range l {
		classes[i] = &l[i]
	}
	sort.Slice(classes, func(i, j int) bool { return classes[i].Name < classes[j].Name })
	return classes, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for i := range l {
		if l[i].Name == name {
			return &l[i], nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}
