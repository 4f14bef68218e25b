"""KubeNexus topology: what the node agent and the placement service share (the topology model and its
codecs, the Kubernetes client layer, the log format) and the version of both programs."""

__version__ = "0.1.0"
