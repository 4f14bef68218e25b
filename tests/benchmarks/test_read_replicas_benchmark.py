"""``benchmarks.placement_replicas`` on a small cluster: the previous routing and each replica count are run,
and every replica of a count does work (its reads are spread); figures, not timings, are checked."""

from __future__ import annotations

import pytest

from benchmarks.placement_replicas import PREVIOUS, run

pytestmark = pytest.mark.slow


def test_each_count_is_run_and_every_replica_of_it_answers() -> None:
    figures = run(nodes=20, replicas=[1, 2], seconds=0.3, clients=2)
    assert [figure.replicas for figure in figures] == [PREVIOUS, 1, 2]
    assert all(figure.decisions_per_s > 0 for figure in figures)
    assert [len(figure.replica_cpu_ms) for figure in figures] == [1, 1, 2]
    assert all(ms > 0 for ms in figures[-1].replica_cpu_ms), "a replica of two did no work"
    assert all(figure.predicted_decisions_per_s > 0 for figure in figures)


@pytest.mark.parametrize("counts", [[], [0, 2]])
def test_replica_counts_must_be_positive(counts: list[int]) -> None:
    with pytest.raises(ValueError, match="give one or more positive counts"):
        run(nodes=20, replicas=counts, seconds=0.1, clients=1)
