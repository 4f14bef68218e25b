package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// benchmarkPod is benchmarks/placement_service.py's GPU pod (24 CPUs, 256 GiB, 4 GPUs) as kube-scheduler's
// informer hands it to the plugin: what the API server's defaulting and admission add to a Deployment's pod
// (requests from the limits, the two not-ready/unreachable tolerations, the service account token volume)
// is there, so the pod JSON the plugin sends is a real pod's.
func benchmarkPod(name string) *v1.Pod {
	amounts := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("24"),
		v1.ResourceMemory: resource.MustParse("256Gi"),
		"nvidia.com/gpu":  resource.MustParse("4"),
	}
	tolerated := int64(300)
	return &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: "bench",
			UID:       types.UID("00000000-0000-4000-8000-" + name),
			Labels:    map[string]string{"app": "trainer"},
		},
		Spec: v1.PodSpec{
			SchedulerName:      "kubenexus-scheduler",
			ServiceAccountName: "default",
			RestartPolicy:      v1.RestartPolicyAlways,
			DNSPolicy:          v1.DNSClusterFirst,
			EnableServiceLinks: ptr.To(true),
			PreemptionPolicy:   ptr.To(v1.PreemptLowerPriority),
			Priority:           ptr.To(int32(0)),
			Containers: []v1.Container{{
				Name:            "main",
				Image:           "registry.example/trainer:1",
				ImagePullPolicy: v1.PullIfNotPresent,
				Resources:       v1.ResourceRequirements{Limits: amounts, Requests: amounts},
				VolumeMounts: []v1.VolumeMount{{
					Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true,
				}},
			}},
			Tolerations: []v1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &tolerated},
				{Key: "node.kubernetes.io/unreachable", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &tolerated},
			},
			Volumes: []v1.Volume{{
				Name: "kube-api-access",
				VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3607))}},
					{ConfigMap: &v1.ConfigMapProjection{
						LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items:                []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
					}},
				}}},
			}},
		},
		Status: v1.PodStatus{Phase: v1.PodPending, QOSClass: v1.PodQOSGuaranteed},
	}
}
