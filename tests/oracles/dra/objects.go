package main

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	resourcev1 "k8s.io/kubernetes/pkg/apis/resource/v1"
	"k8s.io/kubernetes/pkg/apis/resource/validation"
)

// admit does to the case's objects what the API server does before it serves them: the v1 defaults
// (allocationMode ExactCount, count 1, a taint's timeAdded) and the validation of a create
// (pkg/apis/resource/validation). An object the API server would refuse is refused here too, so that
// every case is one a cluster can hold. With validate false (a case's "stored": objects written under
// another release's rules, e.g. a CEL expression the 1.37 environment no longer compiles) only the
// defaults apply: the scheduler evaluates stored objects as they are.
func admit(c *Case, validate validator) error {
	for i := range c.Slices {
		resourcev1.SetObjectDefaults_ResourceSlice(&c.Slices[i])
		var internal resourceinternal.ResourceSlice
		if err := validate.check(&c.Slices[i], &internal, func() field.ErrorList { return validation.ValidateResourceSlice(&internal) }); err != nil {
			return fmt.Errorf("ResourceSlice %s: %w", c.Slices[i].Name, err)
		}
	}
	for i := range c.Classes {
		var internal resourceinternal.DeviceClass
		if err := validate.check(&c.Classes[i], &internal, func() field.ErrorList { return validation.ValidateDeviceClass(&internal) }); err != nil {
			return fmt.Errorf("DeviceClass %s: %w", c.Classes[i].Name, err)
		}
	}
	for _, claims := range [][]resourceapi.ResourceClaim{c.Claims, c.Allocated} {
		for i := range claims {
			resourcev1.SetObjectDefaults_ResourceClaim(&claims[i])
			var internal resourceinternal.ResourceClaim
			if err := validate.check(&claims[i], &internal, func() field.ErrorList { return validation.ValidateResourceClaim(&internal) }); err != nil {
				return fmt.Errorf("ResourceClaim %s: %w", claims[i].Name, err)
			}
		}
	}
	return nil
}

// validator converts a v1 object to its internal form and, when true, runs the API server's validation on it.
type validator bool

func (v validator) check(external, internal any, check func() field.ErrorList) error {
	if err := legacyscheme.Scheme.Convert(external, internal, nil); err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	if !v {
		return nil
	}
	if errs := check(); len(errs) > 0 {
		return fmt.Errorf("invalid: %w", errs.ToAggregate())
	}
	return nil
}
