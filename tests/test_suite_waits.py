"""The suite's own helpers never fail a test for want of a few seconds: a wait whose expiry fails the test
(``assert event.wait(N)``, ``if not event.wait(N)``, ``future.result(timeout=N)``) waits at least
``STARTUP_TIMEOUT_S``, a bound against a hang. One CI run failed because the emulator did not start within a
fixed 10 s on a loaded machine."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import STARTUP_TIMEOUT_S

TESTS = Path(__file__).resolve().parent


def _literal(node: ast.expr | None) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    return None


def _failing_waits(tree: ast.AST) -> list[tuple[int, float]]:
    """(line, seconds) of each wait with a literal bound whose expiry fails: asserted or negated ``.wait(N)``,
    and ``.result(timeout=N)`` (which raises)."""
    found = []
    for node in ast.walk(tree):
        tested = None
        if isinstance(node, ast.Assert):
            tested = node.test
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            tested = node.operand
        if isinstance(tested, ast.Call) and isinstance(tested.func, ast.Attribute) and tested.func.attr == "wait":
            bound = _literal(tested.args[0]) if tested.args else None
            if bound is not None:
                found.append((tested.lineno, bound))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "result":
            for keyword in node.keywords:
                bound = _literal(keyword.value) if keyword.arg == "timeout" else None
                if bound is not None:
                    found.append((node.lineno, bound))
    return found


def test_no_wait_that_fails_a_test_is_shorter_than_the_startup_bound() -> None:
    short = [
        f"{path.name}:{line}: {bound:g} s"
        for path in sorted(TESTS.rglob("*.py"))
        for line, bound in _failing_waits(ast.parse(path.read_text(), filename=str(path)))
        if bound < STARTUP_TIMEOUT_S
    ]
    assert short == []


def test_the_check_sees_each_kind_of_failing_wait() -> None:
    tree = ast.parse(
        "assert started.wait(10)\n"
        "if not ready.wait(5):\n    raise RuntimeError\n"
        "future.result(timeout=3)\n"
        "stop.wait(0.01)\n"  # a pace inside a polling loop: its expiry fails nothing
    )
    assert _failing_waits(tree) == [(1, 10.0), (2, 5.0), (4, 3.0)]
