// Command kubelet is the kubelet resource managers' oracle.
package main

import (
	_ "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	_ "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	_ "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	_ "k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"

	"kubenexus.io/tests/oracles/internal/wire"
)

func main() { wire.Main(func(line []byte) (any, error) { return nil, nil }) }
