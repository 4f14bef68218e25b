package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name   string
		nanos  string
		format string
		want   string
	}{
		{name: "whole CPUs", nanos: "62000000000", format: "DecimalSI", want: "62"},
		{name: "half a CPU", nanos: "500000000", format: "DecimalSI", want: "500m"},
		{name: "thousands", nanos: "2000000000000", format: "DecimalSI", want: "2k"},
		{name: "a Gi of memory", nanos: "1073741824000000000", format: "BinarySI", want: "1Gi"},
		{name: "memory under 1Ki", nanos: "1000000000000", format: "BinarySI", want: "1k"},
		{name: "fractional bytes", nanos: "1536500000000", format: "BinarySI", want: "1536500m"},
		{name: "zero", nanos: "0", format: "BinarySI", want: "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := canonical(tt.nanos, resource.Format(tt.format))
			if err != nil || got != tt.want {
				t.Errorf("canonical(%s, %s) = %q, %v; want %q", tt.nanos, tt.format, got, err, tt.want)
			}
		})
	}
}

func TestCanonicalRefuses(t *testing.T) {
	tests := []struct {
		name   string
		nanos  string
		format string
	}{
		{name: "not an integer", nanos: "1.5", format: "DecimalSI"},
		{name: "unknown format", nanos: "1", format: "DecimalExponent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := canonical(tt.nanos, resource.Format(tt.format)); err == nil {
				t.Errorf("canonical(%s, %s) = %q; want an error", tt.nanos, tt.format, got)
			}
		})
	}
}
