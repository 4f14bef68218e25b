package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// machine is two NUMA nodes of cores CPUs each (no SMT) and 8 GiB, at distance 21.
func machine(cores int) map[string]any {
	var topology []map[string]any
	for id := 0; id < 2; id++ {
		var list []map[string]any
		for c := 0; c < cores; c++ {
			list = append(list, map[string]any{"core_id": c, "thread_ids": []int{id*cores + c}, "socket_id": id})
		}
		topology = append(topology, map[string]any{
			"node_id": id, "memory": 8 << 30, "cores": list,
			"hugepages": []map[string]any{{"page_size": 2048, "num_pages": 0}},
			"distances": []int{10 + 11*id, 21 - 11*id},
		})
	}
	return map[string]any{"num_cores": 2 * cores, "num_physical_cores": 2 * cores, "num_sockets": 2, "topology": topology}
}

func guaranteed(name, cpu, memory string, gpus int) map[string]any {
	resources := map[string]any{"cpu": cpu, "memory": memory}
	if gpus > 0 {
		resources["nvidia.com/gpu"] = fmt.Sprint(gpus)
	}
	return map[string]any{
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"containers": []map[string]any{
			{"name": "c", "resources": map[string]any{"requests": resources, "limits": resources}},
		}},
	}
}

// gpus are four GPUs, two per NUMA node, GPU-3 unhealthy.
var gpus = []map[string]any{{"resource": "nvidia.com/gpu", "devices": []map[string]any{
	{"ID": "GPU-0", "health": "Healthy", "topology": map[string]any{"nodes": []map[string]any{{"ID": 0}}}},
	{"ID": "GPU-1", "health": "Healthy", "topology": map[string]any{"nodes": []map[string]any{{"ID": 0}}}},
	{"ID": "GPU-2", "health": "Healthy", "topology": map[string]any{"nodes": []map[string]any{{"ID": 1}}}},
	{"ID": "GPU-3", "health": "Unhealthy", "topology": map[string]any{"nodes": []map[string]any{{"ID": 1}}}},
}}}

func kubelet(policy string, options map[string]string) map[string]any {
	return map[string]any{
		"topologyManagerPolicy": policy, "topologyManagerScope": "container", "topologyManagerPolicyOptions": options,
		"cpuManagerPolicy": "static", "memoryManagerPolicy": "Static",
		"systemReserved": map[string]string{"cpu": "1", "memory": "512Mi"},
		"reservedMemory": []map[string]any{{"numaNode": 0, "limits": map[string]string{"memory": "512Mi"}}},
	}
}

func TestDecodeCase(t *testing.T) {
	for _, tc := range []struct {
		name, line, err string
	}{
		{"not json", `{`, "bad case"},
		{"no pod", `{"machine": {}}`, "bad case: no pod"},
		{"null earlier pod", `{"pods": [null], "pod": {}}`, "pods[0] is null"},
		{"defaults", `{"pod": {"metadata": {"uid": "mine"}}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := decodeCase([]byte(tc.line))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			k := c.Kubelet
			got := []string{k.TopologyManagerPolicy, k.TopologyManagerScope, k.CPUManagerPolicy, k.MemoryManagerPolicy}
			if want := []string{"none", "container", "none", "None"}; !reflect.DeepEqual(got, want) {
				t.Errorf("defaults %v, want %v", got, want)
			}
			if c.Pod.UID == "mine" || c.Pod.UID == "" {
				t.Errorf("the pod keeps uid %q: uids must be unique per case", c.Pod.UID)
			}
		})
	}
}

func TestUpstreamAnswers(t *testing.T) {
	if _, err := os.Stat(deviceCheckpoint); err != nil && !os.IsNotExist(err) {
		t.Skip(err)
	}
	type want struct {
		admit    []bool
		reason   string
		affinity []int
	}
	for _, tc := range []struct {
		name string
		c    map[string]any
		want want
	}{
		{
			// 3 CPUs left on node 0 (one reserved), 4 on node 1 after the first pod; 4 more fit node 1 only.
			name: "single-numa-node aligns CPUs, memory and GPUs on one node",
			c: map[string]any{
				"machine": machine(4), "kubelet": kubelet("single-numa-node", nil), "devicePlugins": gpus,
				"pods": []any{guaranteed("a", "3", "1Gi", 1)}, "pod": guaranteed("b", "4", "1Gi", 1),
			},
			want: want{admit: []bool{true, true}, affinity: []int{1}},
		},
		{
			name: "single-numa-node: two GPUs only on node 0, which has too few CPUs",
			c: map[string]any{
				"machine": machine(4), "kubelet": kubelet("single-numa-node", nil), "devicePlugins": gpus,
				"pods": []any{}, "pod": guaranteed("b", "4", "1Gi", 2),
			},
			want: want{admit: []bool{false}, reason: "TopologyAffinityError"},
		},
		{
			name: "best-effort admits the same pod, on an affinity no provider prefers",
			c: map[string]any{
				"machine": machine(4), "kubelet": kubelet("best-effort", nil), "devicePlugins": gpus,
				"pods": []any{}, "pod": guaranteed("b", "4", "1Gi", 2),
			},
			want: want{admit: []bool{true}, affinity: []int{0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, err := json.Marshal(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			result, err := judge(t.TempDir(), line)
			if err != nil {
				t.Fatal(err)
			}
			answer := result.(Answer)
			var admitted []bool
			for _, step := range answer.Steps {
				admitted = append(admitted, step.Admit)
			}
			last := answer.Steps[len(answer.Steps)-1]
			if !reflect.DeepEqual(admitted, tc.want.admit) || last.Reason != tc.want.reason {
				t.Fatalf("admitted %v (%s: %s), want %v (%s)", admitted, last.Reason, last.Message, tc.want.admit, tc.want.reason)
			}
			if last.Admit && !reflect.DeepEqual(last.Containers[0].Affinity, tc.want.affinity) {
				t.Errorf("affinity %v, want %v", last.Containers[0].Affinity, tc.want.affinity)
			}
		})
	}
}
