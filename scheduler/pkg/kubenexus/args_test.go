package kubenexus

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeArgs(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	raw := func(text string) runtime.Object { return &runtime.Unknown{Raw: []byte(text)} }
	tests := []struct {
		name    string
		obj     runtime.Object
		want    *Args
		wantErr []string
	}{
		{name: "no args", obj: nil, wantErr: []string{"address: required"}},
		{
			name: "defaults",
			obj:  raw(`{"address":"kubenexus-placement.kubenexus-system.svc:50051"}`),
			want: &Args{
				Address: "kubenexus-placement.kubenexus-system.svc:50051", FailurePolicy: FailurePolicyFail,
				Timeout: duration(5 * time.Second), PermitTimeout: duration(time.Minute),
			},
		},
		{
			name: "everything set",
			obj: raw(`{"address":"unix:///run/kubenexus.sock","caFile":"` + ca + `","serverName":"placement",` +
				`"timeout":"2s","failurePolicy":"Ignore","permitTimeout":"30s"}`),
			want: &Args{
				Address: "unix:///run/kubenexus.sock", CAFile: ca, ServerName: "placement", FailurePolicy: FailurePolicyIgnore,
				Timeout: duration(2 * time.Second), PermitTimeout: duration(30 * time.Second),
			},
		},
		{name: "a typo is an error", obj: raw(`{"address":"a:1","failurepolicy":"Ignore"}`), wantErr: []string{`unknown field "failurepolicy"`}},
		{name: "unknown policy", obj: raw(`{"address":"a:1","failurePolicy":"Retry"}`), wantErr: []string{`failurePolicy: "Retry"`}},
		{name: "timeout too long", obj: raw(`{"address":"a:1","timeout":"2m"}`), wantErr: []string{"timeout: 2m0s is not in"}},
		{name: "negative permit timeout", obj: raw(`{"address":"a:1","permitTimeout":"-1s"}`), wantErr: []string{"permitTimeout: -1s"}},
		{
			name:    "every problem at once",
			obj:     raw(`{"certFile":"` + ca + `","failurePolicy":"x"}`),
			wantErr: []string{"address: required", "certFile and keyFile", "caFile: required", "failurePolicy"},
		},
		{name: "missing CA file", obj: raw(`{"address":"a:1","caFile":"/nonexistent/ca.crt"}`), wantErr: []string{"caFile: stat /nonexistent/ca.crt"}},
		{name: "not JSON", obj: raw(`address: a:1`), wantErr: []string{"KubeNexus args:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeArgs(tt.obj)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("want an error containing %q, got args %+v", tt.wantErr, got)
				}
				for _, fragment := range tt.wantErr {
					if !strings.Contains(err.Error(), fragment) {
						t.Errorf("error %q does not contain %q", err, fragment)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if *got != *tt.want {
				t.Errorf("got %+v, want %+v", *got, *tt.want)
			}
		})
	}
}
