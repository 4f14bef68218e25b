"""The kubelet PodResources v1 API, generated from proto/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto."""
