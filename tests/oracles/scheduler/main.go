// Command scheduler is the kube-scheduler oracle.
package main

import (
	_ "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	_ "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	_ "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"kubenexus.io/tests/oracles/internal/wire"
)

func main() { wire.Main(func(line []byte) (any, error) { return nil, nil }) }
