// Command dra is the DRA structured allocator's oracle.
package main

import (
	_ "k8s.io/dynamic-resource-allocation/cel"
	_ "k8s.io/dynamic-resource-allocation/structured"

	"kubenexus.io/tests/oracles/internal/wire"
)

func main() { wire.Main(func(line []byte) (any, error) { return nil, nil }) }
