package main

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/dynamic-resource-allocation/structured"
)

const gpuClass = `{"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [{"cel": {"expression":
	"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}`

// gpuSlice is one slice of pool "p" (one slice) publishing the GPUs named, for node-a.
func gpuSlice(devices ...string) string {
	entries := make([]string, len(devices))
	for i, name := range devices {
		entries[i] = `{"name": "` + name + `", "attributes": {"type": {"string": "gpu"}}}`
	}
	return `{"metadata": {"name": "s"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-a",
		"pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "devices": [` + strings.Join(entries, ",") + `]}}`
}

func claim(name, request string) string {
	return `{"metadata": {"name": "` + name + `", "namespace": "default"}, "spec": {"devices": {"requests": [` + request + `]}}}`
}

func allocatedClaim(device string) string {
	return `{"metadata": {"name": "earlier", "namespace": "default"},
		"spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
		"status": {"allocation": {"devices": {"results": [
			{"request": "r", "driver": "gpu.nvidia.com", "pool": "p", "device": "` + device + `"}]}}}}`
}

func caseJSON(extra, slices, claims, allocated string) []byte {
	return []byte(`{` + extra + `"node": {"metadata": {"name": "node-a"}}, "classes": [` + gpuClass + `],
		"slices": [` + slices + `], "claims": [` + claims + `], "allocated": [` + allocated + `]}`)
}

func TestJudge(t *testing.T) {
	one := `{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}` // the API server defaults the count
	tests := []struct {
		name      string
		line      []byte
		allocator string
		outcome   string
		devices   []string // per result: request/device
		refused   string   // a substring of the handler's error: the case is not one a cluster holds
		errorText string   // a substring of upstream's error
	}{
		{
			name:      "first device of the pool, with the API server's defaults (ExactCount, count 1)",
			line:      caseJSON("", gpuSlice("gpu-1", "gpu-0"), claim("c", one), ""),
			allocator: "incubating", outcome: "allocated", devices: []string{"gpu/gpu-1"},
		},
		{
			name:      "an allocated device is skipped",
			line:      caseJSON("", gpuSlice("gpu-1", "gpu-0"), claim("c", one), allocatedClaim("gpu-1")),
			allocator: "incubating", outcome: "allocated", devices: []string{"gpu/gpu-0"},
		},
		{
			name: "more devices than the node has",
			line: caseJSON("", gpuSlice("gpu-0"), claim("c",
				`{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}`), ""),
			allocator: "incubating", outcome: "unsatisfiable",
		},
		{
			name: "firstAvailable names the alternative used",
			line: caseJSON("", gpuSlice("gpu-0"), claim("c", `{"name": "gpu", "firstAvailable": [
				{"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
				{"name": "one", "deviceClassName": "gpu.nvidia.com"}]}`), ""),
			allocator: "incubating", outcome: "allocated", devices: []string{"gpu/one/gpu-0"},
		},
		{
			name: "an unknown DeviceClass is an error",
			line: caseJSON("", gpuSlice("gpu-0"), claim("c",
				`{"name": "gpu", "exactly": {"deviceClassName": "missing.example.com"}}`), ""),
			allocator: "incubating", outcome: "error", errorText: "could not retrieve device class missing.example.com",
		},
		{
			name: "a selector failing at runtime is an error",
			line: caseJSON("", gpuSlice("gpu-0"), claim("c", `{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
				"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}]}}`), ""),
			allocator: "incubating", outcome: "error", errorText: "no such key: profile",
		},
		{
			name:      "the stable implementation runs for its features",
			line:      caseJSON(`"features": {"PrioritizedList": true}, `, gpuSlice("gpu-0"), claim("c", one), ""),
			allocator: "stable", outcome: "allocated", devices: []string{"gpu/gpu-0"},
		},
		{
			name:    "a slice the API server refuses is refused",
			line:    []byte(`{"node": {"metadata": {"name": "node-a"}}, "slices": [{"metadata": {"name": "s"}, "spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "resourceSliceCount": 1}}}]}`),
			refused: "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
		},
		{
			name:    "an unknown field is refused",
			line:    []byte(`{"nodes": []}`),
			refused: `unknown field "nodes"`,
		},
		{
			name:    "an unknown feature is refused",
			line:    []byte(`{"features": {"Teleportation": true}}`),
			refused: `unknown allocator feature "Teleportation"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer, err := judge(tt.line)
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("want a refusal with %q, got %v (answer %+v)", tt.refused, err, answer)
				}
				return
			}
			if err != nil {
				t.Fatalf("judge: %v", err)
			}
			if answer.Allocator != tt.allocator || answer.Outcome != tt.outcome {
				t.Fatalf("got %s/%s (%s), want %s/%s", answer.Allocator, answer.Outcome, answer.Error, tt.allocator, tt.outcome)
			}
			if !strings.Contains(answer.Error, tt.errorText) {
				t.Errorf("error %q does not contain %q", answer.Error, tt.errorText)
			}
			var got []string
			for _, result := range answer.Results {
				for _, device := range result.Devices.Results {
					got = append(got, device.Request+"/"+device.Device)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.devices, ",") {
				t.Errorf("devices %v, want %v", got, tt.devices)
			}
			if _, err := json.Marshal(answer); err != nil {
				t.Errorf("the answer does not encode: %v", err)
			}
		})
	}
}

// TestCountersOfAnotherNode is upstream's answer behind a product fix: a MIG device published for node-b
// and allocated there drew the whole counter set that node-a's MIG device shares, so node-a gets nothing.
func TestCountersOfAnotherNode(t *testing.T) {
	migClass := `{"metadata": {"name": "mig"}, "spec": {}}`
	piece := func(name, spec string) string {
		return `{"metadata": {"name": "` + name + `"}, "spec": {"driver": "gpu.nvidia.com",
			"pool": {"name": "p", "generation": 1, "resourceSliceCount": 3}, ` + spec + `}}`
	}
	mig := func(name string) string {
		return `{"name": "` + name + `", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "8"}}}]}`
	}
	slices := strings.Join([]string{
		piece("counters", `"allNodes": true, "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "8"}}}]`),
		piece("a", `"nodeName": "node-a", "devices": [`+mig("mig-a")+`]`),
		piece("b", `"nodeName": "node-b", "devices": [`+mig("mig-b")+`]`),
	}, ",")
	want := map[string]string{"": "allocated", "mig-b": "unsatisfiable"}
	for taken, outcome := range want {
		allocated := ""
		if taken != "" {
			allocated = `{"metadata": {"name": "e", "namespace": "default"},
				"spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "mig"}}]}},
				"status": {"allocation": {"devices": {"results": [
					{"request": "r", "driver": "gpu.nvidia.com", "pool": "p", "device": "` + taken + `"}]}}}}`
		}
		line := []byte(`{"node": {"metadata": {"name": "node-a"}}, "classes": [` + migClass + `], "slices": [` + slices + `],
			"claims": [` + claim("c", `{"name": "r", "exactly": {"deviceClassName": "mig"}}`) + `], "allocated": [` + allocated + `]}`)
		answer, err := judge(line)
		if err != nil {
			t.Fatalf("judge: %v", err)
		}
		if answer.Outcome != outcome {
			t.Errorf("mig-b taken=%q: got %s (%s), want %s", taken, answer.Outcome, answer.Error, outcome)
		}
	}
}

func TestDecodeFeatures(t *testing.T) {
	features, err := decodeFeatures(nil)
	if err != nil || features != Features137 {
		t.Errorf("no features: got %+v, %v; want 1.37's defaults", features, err)
	}
	features, err = decodeFeatures(map[string]bool{"DeviceTaints": true})
	if err != nil || features != (structured.Features{DeviceTaints: true}) {
		t.Errorf("DeviceTaints only: got %+v, %v", features, err)
	}
}
