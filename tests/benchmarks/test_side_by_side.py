"""The side-by-side benchmark runner pairs each line's figures across the two trees, round by round."""

from __future__ import annotations

from benchmarks.side_by_side import side_by_side


def test_lines_are_paired_by_their_text_and_rows_by_their_order() -> None:
    base = "| 1,000 | cpu | 1.00 | yes |\n| 1,000 | gpu | 3.5 | NO |\np99 2.0 ms over 1000 decisions\nonly here 7\n"
    current = "| 1,000 | cpu | 1.00 | yes |\n| 1,000 | gpu | 2.5 | yes |\np99 1.5 ms over 1000 decisions\nnew 9\n"
    assert side_by_side([base], [current]) == [
        "| # | cpu | # | # |\n    round 1: 1,000, 1.00, yes",
        "| # | gpu | # | # |\n    round 1: 1,000, 3.5 | 2.5, NO | yes",
        "p99 # ms over # decisions\n    round 1: 2.0 | 1.5, 1000",
    ]


def test_a_line_missing_from_any_run_is_left_out() -> None:
    runs = ["a 1\nb 2\n", "a 3\n"]
    assert side_by_side(runs, ["a 5\nb 6\n", "a 7\nb 8\n"]) == ["a #\n    round 1: 1 | 5\n    round 2: 3 | 7"]
