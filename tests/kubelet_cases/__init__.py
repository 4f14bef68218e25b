"""Case tables ported from the kubelet's own unit tests (see each module's docstring for the source).
The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""
