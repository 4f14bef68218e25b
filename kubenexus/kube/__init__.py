"""The one Kubernetes client layer of both programs: raw JSON over the official client's ``ApiClient``
(``client``), one failure classification (``errors``), capped jittered backoff (``backoff``), list-and-watch
with resume and relist (``reflector``) and Lease-based leader election (``leader``)."""
