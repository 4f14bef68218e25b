// Command quantity is the resource.Quantity oracle: how k8s.io/apimachinery v0.37.2 prints a quantity, the
// canonical form the API server stores and kubectl shows.
//
// A case (one JSON line): {"nanos": "<integer>", "format": "DecimalSI" | "BinarySI"}, the value in nano units
// (any size: it is read into an inf.Dec, as ParseQuantity holds large values) and the format the quantity
// carries. The answer: the quantity's String().
package main

import (
	"kubenexus.io/tests/oracles/internal/wire"
)

func main() { wire.Main(judge) }
