"""The verdict and the scores before any plugin, and a refusal merged into a verdict: what plugins build on."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from placement.core.feasibility import FilterResult
from placement.core.scoring import Scores
from placement.core.vocabulary import IntArray, Rejected


def passing(rows: IntArray) -> FilterResult:
    """The verdict before any Filter plugin: every row passes."""
    count = len(rows)
    return FilterResult(
        rows=rows,
        feasible=np.ones(count, dtype=np.bool_),
        reason_codes=np.zeros(count, dtype=np.int16),
        messages=(),
        kinds=(),
        exact_rows=np.empty(0, dtype=np.int64),
    )


def unscored(rows: IntArray) -> Scores:
    """The scores before any Score plugin: no component yet."""
    return Scores(
        rows=rows,
        total=np.zeros(len(rows)),
        components={},
        shares={},
        landing_cell=np.full(len(rows), -1, dtype=np.int64),
    )


def opens(verdict: FilterResult) -> bool:
    """Whether ``verdict`` is still the opening one (no plugin refused anything yet)."""
    return not verdict.messages


def refused(verdict: FilterResult, refusals: Sequence[tuple[int, Rejected]], *, exact: bool) -> FilterResult:
    """``verdict`` with the rows at the given positions (passing ones) refused for their reasons; ``exact``: the
    refusals come from the exact per-node model (``FilterResult.exact_rows``)."""
    if not refusals:
        return verdict
    messages, kinds = list(verdict.messages), list(verdict.kinds)
    codes = verdict.reason_codes.copy()
    for position, why in refusals:
        if codes[position]:
            raise ValueError(f"row {int(verdict.rows[position])} is refused already")
        if why.message not in messages[len(verdict.messages) :]:
            messages.append(why.message)
            kinds.append(why.kind)
        codes[position] = len(verdict.messages) + messages[len(verdict.messages) :].index(why.message) + 1
    exact_rows = verdict.exact_rows
    if exact:
        positions = np.array([position for position, _ in refusals], dtype=np.int64)
        exact_rows = np.union1d(exact_rows, verdict.rows[positions]).astype(np.int64)
    return FilterResult(
        rows=verdict.rows,
        feasible=codes == 0,
        reason_codes=codes,
        messages=tuple(messages),
        kinds=tuple(kinds),
        exact_rows=exact_rows,
    )
