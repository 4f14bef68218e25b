"""The placement service's framework, as kube-scheduler's is built (``pkg/scheduler/framework``): the extension
points a plugin implements, the cycle state one request's plugins share, the handle they are built over, the
registry and the profile that say which plugins run, and the pipeline: one entry per extension point."""
