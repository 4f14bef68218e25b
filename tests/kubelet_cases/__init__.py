"""Case tables ported from the kubelet's own unit tests (see each module's docstring for the source)."""
