"""Trace-driven simulator: placement policies side by side on the Alibaba GPU cluster trace.

``trace`` reads the trace and adds topology, gangs and a NUMA policy mix; ``cluster`` is the ground truth
every placement is charged to after the kubelet's admission; ``policies`` holds the baselines and ours
(the real placement core); ``run`` simulates one policy and seed with the FGD paper's method; ``cli`` is
the ``simulate`` command.
"""
