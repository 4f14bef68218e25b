package main

import (
	"reflect"
	"testing"
)

const readyNodes = `"nodes":[
 {"metadata":{"name":"n1","labels":{"kubernetes.io/hostname":"n1","zone":"a"}},
  "spec":{"taints":[{"key":"node.kubernetes.io/not-ready","effect":"NoSchedule"}]},
  "status":{"allocatable":{"cpu":"8","memory":"32Gi","pods":"110"}}},
 {"metadata":{"name":"n2","labels":{"kubernetes.io/hostname":"n2","zone":"b"}},
  "spec":{"unschedulable":true},
  "status":{"allocatable":{"cpu":"8","memory":"32Gi","pods":"110"}}}]`

func TestSchedule(t *testing.T) {
	tests := []struct {
		name       string
		line       string
		decodeErr  bool
		preEnqueue *Verdict
		preFilter  *Verdict
		nodes      map[string]Verdict
	}{
		{name: "not JSON", line: `{"nodes":`, decodeErr: true},
		{name: "a field of the wrong type", line: `{"nodes":{}}`, decodeErr: true},
		{
			name: "a gated pod is refused by PreEnqueue",
			line: `{` + readyNodes + `,"pod":{"metadata":{"name":"p","namespace":"default"},
			  "spec":{"containers":[{"name":"c","image":"i"}],"schedulingGates":[{"name":"a"},{"name":"b"}]}}}`,
			preEnqueue: &Verdict{Code: "UnschedulableAndUnresolvable", Plugin: "SchedulingGates",
				Reasons: []string{"waiting for scheduling gates: [a b]"}},
		},
		{
			name: "the not-ready taint refuses a pod that does not tolerate it; the cordon another",
			line: `{` + readyNodes + `,"pod":{"metadata":{"name":"p","namespace":"default"},
			  "spec":{"containers":[{"name":"c","image":"i"}]}}}`,
			nodes: map[string]Verdict{
				"n1": {Code: "UnschedulableAndUnresolvable", Plugin: "TaintToleration", Reasons: []string{"node(s) had untolerated taint(s)"}},
				"n2": {Code: "UnschedulableAndUnresolvable", Plugin: "NodeUnschedulable", Reasons: []string{"node(s) were unschedulable"}},
			},
		},
		{
			name: "a pod tolerating not-ready fits the not-ready node",
			line: `{` + readyNodes + `,"pod":{"metadata":{"name":"p","namespace":"default"},
			  "spec":{"containers":[{"name":"c","image":"i"}],
			  "tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists"}]}}}`,
			nodes: map[string]Verdict{
				"n1": {Code: "Success"},
				"n2": {Code: "UnschedulableAndUnresolvable", Plugin: "NodeUnschedulable", Reasons: []string{"node(s) were unschedulable"}},
			},
		},
		{
			name: "a claim that does not exist refuses the pod in PreFilter (VolumeRestrictions runs first)",
			line: `{` + readyNodes + `,"pod":{"metadata":{"name":"p","namespace":"default"},
			  "spec":{"containers":[{"name":"c","image":"i"}],
			  "volumes":[{"name":"v","persistentVolumeClaim":{"claimName":"gone"}}]}}}`,
			preFilter: &Verdict{Code: "UnschedulableAndUnresolvable", Plugin: "VolumeRestrictions",
				Reasons: []string{`persistentvolumeclaim "gone" not found`}},
		},
		{
			name: "nodes outside NodeAffinity's PreFilterResult",
			line: `{` + readyNodes + `,"pod":{"metadata":{"name":"p","namespace":"default"},
			  "spec":{"containers":[{"name":"c","image":"i"}],"tolerations":[{"operator":"Exists"}],
			  "affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
			    {"matchFields":[{"key":"metadata.name","operator":"In","values":["n2"]}]}]}}}}}}`,
			nodes: map[string]Verdict{
				"n1": {Code: "UnschedulableAndUnresolvable", Reasons: []string{"node(s) didn't satisfy plugin(s) [NodeAffinity]"}},
				"n2": {Code: "Success"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := decode([]byte(tt.line))
			if tt.decodeErr {
				if err == nil {
					t.Fatalf("decode accepted %s", tt.line)
				}
				return
			}
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			got, err := schedule(c)
			if err != nil {
				t.Fatalf("schedule: %v", err)
			}
			if !reflect.DeepEqual(got.PreEnqueue, tt.preEnqueue) {
				t.Errorf("PreEnqueue: got %+v, want %+v", got.PreEnqueue, tt.preEnqueue)
			}
			if !reflect.DeepEqual(got.PreFilter, tt.preFilter) {
				t.Errorf("PreFilter: got %+v, want %+v", got.PreFilter, tt.preFilter)
			}
			if tt.nodes != nil && !reflect.DeepEqual(got.Nodes, tt.nodes) {
				t.Errorf("nodes: got %+v, want %+v", got.Nodes, tt.nodes)
			}
		})
	}
}

func TestScores(t *testing.T) {
	line := `{"nodes":[
	 {"metadata":{"name":"n1","labels":{"zone":"a"}},"spec":{"taints":[{"key":"x","effect":"PreferNoSchedule"}]},
	  "status":{"allocatable":{"cpu":"8","memory":"32Gi","pods":"110"}}},
	 {"metadata":{"name":"n2","labels":{"zone":"b"}},"status":{"allocatable":{"cpu":"8","memory":"32Gi","pods":"110"}}}],
	 "pod":{"metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c","image":"i"}],
	  "affinity":{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[
	   {"weight":10,"preference":{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]}}]}}}}}`
	c, err := decode([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	got, err := schedule(c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int64{"n1": {0, 100}, "n2": {100, 0}} // TaintToleration, NodeAffinity
	for _, node := range []string{"n1", "n2"} {
		plugins := got.Scores[node].Plugins
		if plugins["TaintToleration"] != want[node][0] || plugins["NodeAffinity"] != want[node][1] {
			t.Errorf("%s: got %v, want TaintToleration %d NodeAffinity %d", node, plugins, want[node][0], want[node][1])
		}
	}
	if got.ScoreError != "" {
		t.Errorf("scoring failed: %s", got.ScoreError)
	}
	if got.Weights["TaintToleration"] != 3 || got.Weights["NodeAffinity"] != 2 {
		t.Errorf("weights %v, want the default profile's", got.Weights)
	}
}
