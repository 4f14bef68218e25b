package kubenexus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// deleteProtection is the finalizer kube-scheduler's DynamicResources plugin puts on a claim it allocates.
const deleteProtection = "resource.kubernetes.io/delete-protection"

// claimAttempts bounds the retries of a claim write that meets a newer version (409).
const claimAttempts = 5

// writeClaim writes the service's device choice into a claim before the pod binds, as DynamicResources does
// at PreBind (bindClaim) and as the binder's claim writer does (placement/shim/claim_writer.py): first the
// delete-protection finalizer through the object, then status.allocation and the pod in status.reservedFor
// through /status, each an update carrying the version read (a conflict reads the claim again). A claim
// allocated already, by whoever, is only reserved for the pod; one allocated to other devices meanwhile is
// an error, so that the pod is planned again from the claim as it now is.
func (p *Plugin) writeClaim(ctx context.Context, pod *v1.Pod, claim *placementv1.ClaimAllocation) error {
	var allocation *resourcev1.AllocationResult
	if text := claim.GetAllocationJson(); text != "" {
		allocation = &resourcev1.AllocationResult{}
		if err := json.Unmarshal([]byte(text), allocation); err != nil {
			return fmt.Errorf("the service's allocation of claim %s/%s: %w", claim.GetNamespace(), claim.GetName(), err)
		}
	}
	consumer := resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID}
	claims := p.handle.ClientSet().ResourceV1().ResourceClaims(claim.GetNamespace())
	for range claimAttempts {
		current, err := claims.Get(ctx, claim.GetName(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("resourceclaim %s/%s: %w", claim.GetNamespace(), claim.GetName(), err)
		}
		if current.DeletionTimestamp != nil {
			return fmt.Errorf("resourceclaim %s/%s is being deleted", claim.GetNamespace(), claim.GetName())
		}
		held := current.Status.Allocation
		switch {
		case held == nil && allocation == nil:
			return fmt.Errorf("resourceclaim %s/%s is no longer allocated", claim.GetNamespace(), claim.GetName())
		case held != nil && allocation != nil && !apiequality.Semantic.DeepEqual(held, allocation):
			return fmt.Errorf("resourceclaim %s/%s was allocated meanwhile, to other devices", claim.GetNamespace(), claim.GetName())
		case held != nil && slices.ContainsFunc(current.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == pod.UID }):
			return nil // written by an earlier pass
		}
		if !slices.Contains(current.Finalizers, deleteProtection) {
			current = current.DeepCopy()
			current.Finalizers = append(current.Finalizers, deleteProtection)
			if current, err = claims.Update(ctx, current, metav1.UpdateOptions{}); err != nil {
				if apierrors.IsConflict(err) {
					continue
				}
				return fmt.Errorf("resourceclaim %s/%s: %w", claim.GetNamespace(), claim.GetName(), err)
			}
		}
		current = current.DeepCopy()
		if held == nil {
			current.Status.Allocation = allocation
		}
		current.Status.ReservedFor = append(current.Status.ReservedFor, consumer)
		if _, err = claims.UpdateStatus(ctx, current, metav1.UpdateOptions{}); err == nil {
			return nil
		} else if !apierrors.IsConflict(err) {
			return fmt.Errorf("resourceclaim %s/%s: %w", claim.GetNamespace(), claim.GetName(), err)
		}
	}
	return fmt.Errorf("resourceclaim %s/%s kept changing; will retry", claim.GetNamespace(), claim.GetName())
}

// releaseClaim takes the pod out of a claim's reservedFor (a binding that did not complete); deallocating a
// claim nobody reserves stays with the ResourceClaim controller, as upstream.
func (p *Plugin) releaseClaim(ctx context.Context, pod *v1.Pod, claim *placementv1.ClaimAllocation) error {
	claims := p.handle.ClientSet().ResourceV1().ResourceClaims(claim.GetNamespace())
	for range claimAttempts {
		current, err := claims.Get(ctx, claim.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		kept := slices.DeleteFunc(slices.Clone(current.Status.ReservedFor), func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == pod.UID })
		if len(kept) == len(current.Status.ReservedFor) {
			return nil
		}
		current = current.DeepCopy()
		current.Status.ReservedFor = kept
		if _, err = claims.UpdateStatus(ctx, current, metav1.UpdateOptions{}); err == nil || !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("resourceclaim %s/%s kept changing", claim.GetNamespace(), claim.GetName())
}
