"""Case tables ported from kube-scheduler's plugin tests and the component helpers' tests, as data.

Each module names its kubernetes/kubernetes source file(s) and test function(s); every case keeps the
upstream case name. ``builders`` mirrors the Go tests' wrappers (``st.MakePod``, ``st.MakeNode``,
``st.MakeLabelSelector``) in the model's types; ``cases`` holds the two case shapes the tests run.

Expectations are upstream's, translated into this port's words: a status code becomes the plugin's
``Rejected`` (message and kind), ``Unschedulable`` a ``POD_CONSTRAINT``, ``UnschedulableAndUnresolvable`` a
``NODE_CONSTRAINT``. A Go test that runs one plugin alone states what that plugin says (``plugin``); where
the whole filter says something else because an earlier plugin refuses first (upstream's own comments say
so: "in real case, it's false"), ``combined`` says what the whole filter answers for that node.
"""
