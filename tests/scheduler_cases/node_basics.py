"""kubernetes/kubernetes ``pkg/scheduler/framework/plugins/``:

- ``tainttoleration/taint_toleration_test.go``: TestTaintTolerationFilter, TestTaintTolerationScore;
- ``nodeunschedulable/node_unschedulable_test.go``: TestNodeUnschedulable;
- ``nodename/node_name_test.go``: TestNodeName;
- ``nodeports/node_ports_test.go``: TestNodePorts, TestFits.

Not ported: the taint cases with the alpha comparison operators (``Gt``/``Lt`` tolerations, feature
TaintTolerationComparisonOperators): the model's tolerations have Equal and Exists only. The expected
taint message is v1.37's (``node(s) had untolerated taint(s)``). TestNodeName calls the Filter alone; through
the whole filter a node other than ``spec.nodeName`` is left out by NodeName's PreFilterResult. NodePorts'
init-container cases are given as what parsing makes of them: a non-sidecar init container's ports are no
host ports, a sidecar's are.

kube-scheduler v1.37.2's own plugins now judge these plugins on random GPU clusters too:
tests/upstream/test_oracle_scheduler.py (tests/oracles/scheduler).
"""

from __future__ import annotations

from placement.core.constraints.constraint_types import HostPort, PodConstraints, Taint, Toleration
from placement.core.constraints.terms import IncomingPod
from placement.core.constraints.verdicts import (
    NO_FREE_PORTS,
    NODE_NAME_MISMATCH,
    NODE_UNSCHEDULABLE,
    UNTOLERATED_TAINT,
    outside_pre_filter_result,
)
from tests.scheduler_cases.builders import NO_SCHEDULE, PREFER_NO_SCHEDULE, node, placed, port, toleration
from tests.scheduler_cases.cases import FilterCase, ScoreCase

TAINT_FILTER = "tainttoleration/taint_toleration_test.go TestTaintTolerationFilter"
TAINT_SCORE = "tainttoleration/taint_toleration_test.go TestTaintTolerationScore"
UNSCHEDULABLE = "nodeunschedulable/node_unschedulable_test.go TestNodeUnschedulable"
NODE_NAME = "nodename/node_name_test.go TestNodeName"
NODE_PORTS = "nodeports/node_ports_test.go TestNodePorts"
FITS = "nodeports/node_ports_test.go TestFits"


def _tolerating(*tolerations: Toleration) -> IncomingPod:
    return IncomingPod("", (), PodConstraints(tolerations=tolerations))


def _taint_case(name: str, pod: IncomingPod, taints: tuple[Taint, ...], refused_by: Taint | None) -> FilterCase:
    """``refused_by``: the taint upstream's Filter finds untolerated (it names it in its log only)."""
    return FilterCase(
        TAINT_FILTER,
        name,
        "taint_toleration",
        pod,
        (node("nodeA", taints=taints),),
        {"nodeA": None if refused_by is None else UNTOLERATED_TAINT},
    )


_USER1 = Taint("dedicated", NO_SCHEDULE, "user1")
_FOO_BAR = Taint("foo", NO_SCHEDULE, "bar")

TAINT_FILTER_CASES: list[FilterCase] = [
    _taint_case(
        "A pod having no tolerations can't be scheduled onto a node with nonempty taints",
        _tolerating(),
        (_USER1,),
        _USER1,
    ),
    _taint_case(
        "A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
        _tolerating(toleration("dedicated", "user1", NO_SCHEDULE)),
        (_USER1,),
        None,
    ),
    _taint_case(
        "A pod which can't be scheduled on a dedicated node assigned to user2 with effect NoSchedule",
        _tolerating(toleration("dedicated", "user2", NO_SCHEDULE)),
        (_USER1,),
        _USER1,
    ),
    _taint_case(
        "A pod can be scheduled onto the node, with a toleration uses operator Exists that tolerates the taints on "
        "the node",
        _tolerating(toleration("foo", effect=NO_SCHEDULE, exists_=True)),
        (_FOO_BAR,),
        None,
    ),
    _taint_case(
        "A pod has multiple tolerations, node has multiple taints, all the taints are tolerated, pod can be "
        "scheduled onto the node",
        _tolerating(toleration("dedicated", "user2", NO_SCHEDULE), toleration("foo", effect=NO_SCHEDULE, exists_=True)),
        (Taint("dedicated", NO_SCHEDULE, "user2"), _FOO_BAR),
        None,
    ),
    _taint_case(
        "A pod has a toleration that keys and values match the taint on the node, but (non-empty) effect doesn't "
        "match, can't be scheduled onto the node",
        _tolerating(toleration("foo", "bar", PREFER_NO_SCHEDULE)),
        (_FOO_BAR,),
        _FOO_BAR,
    ),
    _taint_case(
        "The pod has a toleration that keys and values match the taint on the node, the effect of toleration is "
        "empty, and the effect of taint is NoSchedule. Pod can be scheduled onto the node",
        _tolerating(toleration("foo", "bar")),
        (_FOO_BAR,),
        None,
    ),
    _taint_case(
        "The pod has a toleration that key and value don't match the taint on the node, but the effect of taint "
        "on node is PreferNoSchedule. Pod can be scheduled onto the node",
        _tolerating(toleration("dedicated", "user2", NO_SCHEDULE)),
        (Taint("dedicated", PREFER_NO_SCHEDULE, "user1"),),
        None,
    ),
    _taint_case(
        "The pod has no toleration, but the effect of taint on node is PreferNoSchedule. Pod can be scheduled "
        "onto the node",
        _tolerating(),
        (Taint("dedicated", PREFER_NO_SCHEDULE, "user1"),),
        None,
    ),
]

_ARM = Taint("cpu-type", PREFER_NO_SCHEDULE, "arm64")
_SSD = Taint("disk-type", PREFER_NO_SCHEDULE, "ssd")


def _score_case(name: str, pod: IncomingPod, taints: list[tuple[Taint, ...]], want: list[int]) -> ScoreCase:
    nodes = tuple(node(f"node{'ABC'[i]}", taints=t) for i, t in enumerate(taints))
    return ScoreCase(TAINT_SCORE, name, "TaintToleration", pod, nodes, tuple(want))


TAINT_SCORE_CASES: list[ScoreCase] = [
    _score_case(
        "node with taints tolerated by the pod, gets a higher score than those node with intolerable taints",
        _tolerating(toleration("foo", "bar", PREFER_NO_SCHEDULE)),
        [(Taint("foo", PREFER_NO_SCHEDULE, "bar"),), (Taint("foo", PREFER_NO_SCHEDULE, "blah"),)],
        [100, 0],
    ),
    _score_case(
        "the nodes that all of their taints are tolerated by the pod, get the same score, no matter how many "
        "tolerable taints a node has",
        _tolerating(
            toleration("cpu-type", "arm64", PREFER_NO_SCHEDULE), toleration("disk-type", "ssd", PREFER_NO_SCHEDULE)
        ),
        [(), (_ARM,), (_ARM, _SSD)],
        [100, 100, 100],
    ),
    _score_case(
        "the more intolerable taints a node has, the lower score it gets.",
        _tolerating(toleration("foo", "bar", PREFER_NO_SCHEDULE)),
        [(), (_ARM,), (_ARM, _SSD)],
        [100, 50, 0],
    ),
    _score_case(
        "only taints and tolerations that have effect PreferNoSchedule are checked by taints-tolerations priority "
        "function",
        _tolerating(toleration("cpu-type", "arm64", NO_SCHEDULE), toleration("disk-type", "ssd", NO_SCHEDULE)),
        [(), (Taint("cpu-type", NO_SCHEDULE, "arm64"),), (_ARM, _SSD)],
        [100, 100, 0],
    ),
    _score_case(
        "Default behaviour No taints and tolerations, lands on node with no taints",
        _tolerating(),
        [(), (_ARM,)],
        [100, 0],
    ),
]

UNSCHEDULABLE_CASES: list[FilterCase] = [
    FilterCase(
        UNSCHEDULABLE,
        "Does not schedule pod to unschedulable node (node.Spec.Unschedulable==true)",
        "node_unschedulable",
        _tolerating(),
        (node("", unschedulable=True),),
        {"": NODE_UNSCHEDULABLE},
    ),
    FilterCase(
        UNSCHEDULABLE,
        "Schedule pod to normal node",
        "node_unschedulable",
        _tolerating(),
        (node(""),),
        {"": None},
    ),
    FilterCase(
        UNSCHEDULABLE,
        "Schedule pod with toleration to unschedulable node (node.Spec.Unschedulable==true)",
        "node_unschedulable",
        _tolerating(toleration("node.kubernetes.io/unschedulable", effect=NO_SCHEDULE)),
        (node("", unschedulable=True),),
        {"": None},
    ),
]

NODE_NAME_CASES: list[FilterCase] = [
    FilterCase(NODE_NAME, "no host specified", "node_name", IncomingPod(""), (node(""),), {"": None}),
    FilterCase(
        NODE_NAME,
        "host matches",
        "node_name",
        IncomingPod("", (), PodConstraints(node_name="foo")),
        (node("foo"),),
        {"foo": None},
    ),
    FilterCase(
        NODE_NAME,
        "host doesn't match",
        "node_name",
        IncomingPod("", (), PodConstraints(node_name="bar")),
        (node("foo"),),
        {"foo": NODE_NAME_MISMATCH},
        combined={"foo": outside_pre_filter_result(("NodeName",))},
    ),
]


def _ports_case(source: str, name: str, wanted: tuple[str, ...], used: tuple[str, ...], fits: bool) -> FilterCase:
    used_by = (placed("m1", ports=tuple(port(p) for p in used), name="existing"),) if used else ()
    return FilterCase(
        source,
        name,
        "node_ports",
        IncomingPod("", (), PodConstraints(host_ports=tuple(port(p) for p in wanted))),
        (node("m1"),),
        {"m1": None if fits else NO_FREE_PORTS},
        pods=used_by,
    )


NODE_PORTS_CASES: list[FilterCase] = [
    _ports_case(NODE_PORTS, "skip filter", (), (), True),
    _ports_case(NODE_PORTS, "other port", ("UDP/127.0.0.1/8080",), ("UDP/127.0.0.1/9090",), True),
    _ports_case(NODE_PORTS, "same udp port", ("UDP/127.0.0.1/8080",), ("UDP/127.0.0.1/8080",), False),
    _ports_case(NODE_PORTS, "same tcp port", ("TCP/127.0.0.1/8080",), ("TCP/127.0.0.1/8080",), False),
    _ports_case(NODE_PORTS, "different host ip", ("TCP/127.0.0.1/8080",), ("TCP/127.0.0.2/8080",), True),
    _ports_case(NODE_PORTS, "different protocol", ("UDP/127.0.0.1/8080",), ("TCP/127.0.0.1/8080",), True),
    _ports_case(
        NODE_PORTS,
        "second udp port conflict",
        ("UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"),
        ("UDP/127.0.0.1/8080",),
        False,
    ),
    _ports_case(
        NODE_PORTS,
        "first tcp port conflict",
        ("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
        ("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"),
        False,
    ),
    _ports_case(
        NODE_PORTS,
        "first tcp port conflict due to 0.0.0.0 hostIP",
        ("TCP/0.0.0.0/8001",),
        ("TCP/127.0.0.1/8001",),
        False,
    ),
    _ports_case(
        NODE_PORTS,
        "TCP hostPort conflict due to 0.0.0.0 hostIP",
        ("TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"),
        ("TCP/127.0.0.1/8001",),
        False,
    ),
    _ports_case(
        NODE_PORTS, "second tcp port conflict to 0.0.0.0 hostIP", ("TCP/127.0.0.1/8001",), ("TCP/0.0.0.0/8001",), False
    ),
    _ports_case(NODE_PORTS, "second different protocol", ("UDP/127.0.0.1/8001",), ("TCP/0.0.0.0/8001",), True),
    _ports_case(
        NODE_PORTS,
        "UDP hostPort conflict due to 0.0.0.0 hostIP",
        ("UDP/127.0.0.1/8001",),
        ("TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"),
        False,
    ),
    _ports_case(NODE_PORTS, "non-sidecar initContainer using hostPort", (), ("TCP/0.0.0.0/8001",), True),
    FilterCase(
        NODE_PORTS,
        "TCP hostPort conflict from sidecar initContainer",
        "node_ports",
        IncomingPod("", (), PodConstraints(host_ports=(HostPort(8001, "TCP"),))),  # HostIP unset
        (node("m1"),),
        {"m1": NO_FREE_PORTS},
        pods=(placed("m1", ports=(port("TCP/0.0.0.0/8001"),), name="existing"),),
    ),
    _ports_case(FITS, "non-conflicting ports", ("TCP/127.0.0.1/80",), ("TCP/127.0.0.1/9090",), True),
    _ports_case(
        FITS,
        "multiple non-conflicting ports",
        ("TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"),
        ("TCP/127.0.0.1/9090", "TCP/127.0.0.1/9191", "TCP/127.0.1.1/8080"),
        True,
    ),
    _ports_case(FITS, "same ports on different protocols", ("TCP/127.0.0.1/80",), ("UDP/127.0.0.1/80",), True),
    _ports_case(FITS, "conflicting ports", ("TCP/127.0.0.1/80",), ("TCP/127.0.0.1/80",), False),
    _ports_case(
        FITS,
        "multiple ports, some conflicting",
        ("TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"),
        ("TCP/127.0.0.1/9090", "TCP/127.0.1.1/90", "TCP/127.0.1.1/8080"),
        False,
    ),
]
