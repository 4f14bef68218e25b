package main

import (
	"encoding/json"
	"fmt"
	"math/big"

	"gopkg.in/inf.v0"
	"k8s.io/apimachinery/pkg/api/resource"
)

type quantityCase struct {
	Nanos  string          `json:"nanos"`
	Format resource.Format `json:"format"`
}

func judge(line []byte) (any, error) {
	var c quantityCase
	if err := json.Unmarshal(line, &c); err != nil {
		return nil, err
	}
	return canonical(c.Nanos, c.Format)
}

// canonical prints nanos/10^9 as a quantity of the given format.
func canonical(nanos string, format resource.Format) (string, error) {
	if format != resource.DecimalSI && format != resource.BinarySI {
		return "", fmt.Errorf("format %q: accepted: DecimalSI | BinarySI", format)
	}
	unscaled, ok := new(big.Int).SetString(nanos, 10)
	if !ok {
		return "", fmt.Errorf("nanos %q is not an integer", nanos)
	}
	quantity := resource.NewDecimalQuantity(*inf.NewDecBig(unscaled, 9), format)
	return quantity.String(), nil
}
