"""The binder's FailedScheduling message, worded as kube-scheduler words it."""

from __future__ import annotations

from placement.api.v1 import placement_pb2 as pb
from placement.shim.binder import _no_node_message


def test_no_node_at_all_reads_as_kube_schedulers_no_nodes_error() -> None:
    # ErrNoNodesAvailable (pkg/scheduler/schedule_one.go), not "0/0 nodes are available: ."
    assert _no_node_message([]) == "no nodes available to schedule pods."


def test_reasons_are_counted_and_sorted_as_kube_scheduler_sorts_them() -> None:
    rejected = [
        pb.Rejections(reason="Insufficient nvidia.com/gpu", nodes=["a", "b"]),
        pb.Rejections(reason="node(s) had untolerated taint(s)", nodes=["c"]),
    ]
    assert _no_node_message(rejected) == (
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/gpu."
    )
