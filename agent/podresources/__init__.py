"""Generated Python code of the kubelet PodResources API (see tools/regen_protos.sh)."""
