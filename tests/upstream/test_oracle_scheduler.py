"""kube-scheduler v1.37.2's own plugins judge the project's constraint plugins (tests/oracles/scheduler).

For random GPU clusters and pods (tests/oracle_scheduler_cases.py), upstream's framework runtime runs the
default profile's PreEnqueue, PreFilter, Filter, PreScore and Score; the project reads the same objects the
service's way and runs its vectorised plugins and its node-by-node reference. Per node the verdict must be
the same (Success, or the same code, Unschedulable or UnschedulableAndUnresolvable, and the same reason);
a pod refused before any node is judged must be refused with upstream's words; the feasible nodes' scores
of TaintToleration, NodeAffinity, PodTopologySpread and InterPodAffinity must be upstream's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, note

from tests.oracle_process import Oracle, oracle_settings
from tests.oracle_scheduler_cases import cases, oracle_answer, project_answers, score_differences

pytestmark = pytest.mark.oracle


@oracle_settings()
@given(cases())
def test_the_plugins_answer_as_kube_scheduler(scheduler_oracle: Oracle, case: dict[str, Any]) -> None:
    note(json.dumps(case, separators=(",", ":")))
    result = scheduler_oracle.ask(case)
    assert not result.get("scoreError"), f"upstream's PreScore or Score failed: {result['scoreError']}"
    upstream = oracle_answer(result)
    vectorised, ported = project_answers(case)
    for label, answer in (("vectorised", vectorised), ("reference", ported)):
        assert answer.nodes == upstream.nodes, f"{label} filter: project {answer.nodes}, upstream {upstream.nodes}"
        problems = score_differences(upstream, answer)
        assert not problems, f"{label} scores: " + "; ".join(problems)
