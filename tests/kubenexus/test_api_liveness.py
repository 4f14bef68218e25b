"""``kubenexus.kube.liveness``: the API server's silence counted from its last answer (a fake clock and probe;
the real kube-apiserver paused: tests/cluster/test_cluster_service.py)."""

from __future__ import annotations

import logging
import threading

import pytest

from kubenexus.kube.errors import ApiError
from kubenexus.kube.liveness import ApiLiveness


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Probe:
    """Answers while ``up``; otherwise fails as a timed-out read does."""

    def __init__(self) -> None:
        self.up = True
        self.asked = 0

    def ready(self, timeout_s: float) -> None:
        self.asked += 1
        if not self.up:
            raise TimeoutError(f"no answer within {timeout_s} s")


def _liveness(probe: Probe, clock: Clock) -> ApiLiveness:
    return ApiLiveness(probe, stop=threading.Event(), silence_s=10.0, clock=clock)


def test_answering_until_the_silence_passes_the_bound_then_again_at_the_first_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe, clock = Probe(), Clock()
    liveness = _liveness(probe, clock)
    assert liveness.answering  # the initial lists have just proved it
    probe.up = False
    for _ in range(5):  # one failed ask every 2 s: 10 s of silence is still within the bound
        clock.now += 2.0
        liveness.ask()
        assert liveness.answering
    caplog.set_level(logging.INFO, logger="kubenexus.kube.liveness")
    clock.now += 2.0
    liveness.ask()
    assert not liveness.answering
    assert liveness.silent_for_s == pytest.approx(12.0)
    clock.now += 2.0
    liveness.ask()  # still silent: said once
    assert [r.getMessage() for r in caplog.records] == ["the API server has not answered; the cache may be stale"]
    probe.up = True
    clock.now += 2.0
    liveness.ask()
    assert liveness.answering
    assert caplog.records[-1].getMessage() == "the API server answers again"


def test_an_error_answer_is_silence_too() -> None:
    """A server that answers ``/readyz`` 500 (shutting down, etcd unreachable) is not ready to be trusted."""

    class Failing(Probe):
        def ready(self, timeout_s: float) -> None:
            raise ApiError(500, "[-]etcd failed: reason withheld")

    clock = Clock()
    liveness = _liveness(Failing(), clock)
    clock.now += 11.0
    liveness.ask()
    assert not liveness.answering


def test_run_asks_until_stopped() -> None:
    probe, stop = Probe(), threading.Event()
    liveness = ApiLiveness(probe, stop=stop, interval_s=0.01)
    thread = threading.Thread(target=liveness.run)
    thread.start()
    try:
        while probe.asked < 3:
            stop.wait(0.01)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
