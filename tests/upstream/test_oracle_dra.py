"""The DRA allocator judged by upstream's own code: k8s.io/dynamic-resource-allocation v0.37.2's structured
allocator (tests/oracles/dra, the "incubating" implementation that kube-scheduler 1.37 runs with its
default feature gates) against the product's first fit and best fit, on random clusters shaped like
../shared/data/dra (tests/oracle_dra_cases.py).

* First fit is meant to be upstream's choice exactly: the same outcome (allocated, unsatisfiable, or an
  error of the same kind) and, when allocated, the same devices for the same requests in the same order
  (incubating walks pools sorted by driver and name, slices by name, devices as published: deterministic).
* Best fit chooses among the solutions by topology: the same outcome, and its choice is one upstream
  accepts (the case reduced to the chosen devices is allocatable upstream).

A divergence prints the case (``hypothesis.note``, shrunk) and both answers. Known differences that the
cases leave out are in docs/dra.md ("Checked against upstream").
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import event, given, note, settings

from tests.oracle_dra_cases import (
    Verdict,
    ask_upstream,
    dra_cases,
    oracle_verdict,
    product_answer,
    selector_failed_off_node,
    stale_generation_used,
    uses_all_mode,
    verification_case,
)
from tests.oracle_process import DEEP_CASES, FIXED_CASES, Oracle, oracle_settings

pytestmark = pytest.mark.oracle


def _share(*, first_fit: bool) -> settings:
    """``oracle_settings()`` with this property's share of the oracle's cases: two thirds for first fit, the
    rest for best fit, of ``FIXED_CASES`` or, in deep mode, of ``KUBENEXUS_ORACLE_CASES`` (the oracle
    judges that many cases in all)."""
    total = DEEP_CASES or FIXED_CASES
    first = total * 2 // 3
    return settings(oracle_settings(), max_examples=first if first_fit else total - first)


def _show(case: dict[str, Any]) -> bool:
    """Note the case for a reproduction; False when it is a known difference left out (docs/dra.md)."""
    note(json.dumps(case, separators=(",", ":")))
    if stale_generation_used(case):
        event("left out: upstream allocates from a stale pool generation")
        return False
    return True


def _gave_up(ours: Verdict) -> bool:
    """The product's search stopped at its limit of device tries (``search.MAX_DEVICE_TRIES``), where
    upstream searches on until the Filter's deadline (docs/dra.md, "Checked against upstream")."""
    if ours.outcome == "error" and "device tries" in ours.text:
        event("left out: the product's search stopped at its limit of device tries")
        return True
    return False


def _same_outcome(oracle: Oracle, case: dict[str, Any], *, best: bool) -> tuple[Any, Any] | None:
    """Upstream's and the product's answers (first fit, or best fit), held to the same outcome and error kind;
    None for a case left out (documented in docs/dra.md, counted as a hypothesis event)."""
    if not _show(case):
        return None
    upstream = oracle_verdict(ask_upstream(oracle, case))
    if selector_failed_off_node(case, upstream):
        event("left out: upstream runs selectors on a device of another node")
        return None
    event(f"upstream: {upstream.outcome} {upstream.error_kind}".strip())
    ours = product_answer(case, best=best)
    if _gave_up(ours):
        return None
    assert ours.outcome == upstream.outcome, f"upstream: {upstream}\nproduct: {ours}"
    assert ours.error_kind == upstream.error_kind, f"upstream: {upstream}\nproduct: {ours}"
    return upstream, ours


@_share(first_fit=True)
@given(case=dra_cases(seeded=bool(DEEP_CASES)))
def test_first_fit_is_upstreams_choice(dra_oracle: Oracle, case: dict[str, Any]) -> None:
    answers = _same_outcome(dra_oracle, case, best=False)
    if answers is None:
        return
    upstream, ours = answers
    assert ours.devices == upstream.devices, f"upstream: {upstream}\nproduct: {ours}"


@_share(first_fit=False)
@given(case=dra_cases(seeded=bool(DEEP_CASES)))
def test_best_fit_is_a_choice_upstream_accepts(dra_oracle: Oracle, case: dict[str, Any]) -> None:
    answers = _same_outcome(dra_oracle, case, best=True)
    if answers is None:
        return
    _, ours = answers
    if ours.outcome == "allocated" and not uses_all_mode(case):
        reduced = verification_case(case, ours)
        check = oracle_verdict(ask_upstream(dra_oracle, reduced))
        assert check.outcome == "allocated", f"upstream refuses best fit's devices {ours.devices}: {check}"
