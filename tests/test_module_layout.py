"""The placement service's layout, held: one name per module under placement/ (a reader finds each concern in one
place), and no module of the service's or the state's layers over 600 lines (split by role instead)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PLACEMENT = Path(__file__).resolve().parent.parent / "placement"
GENERATED = PLACEMENT / "api" / "v1"  # protoc's output
MAX_LINES = 600


def _modules() -> list[Path]:
    return [p for p in PLACEMENT.rglob("*.py") if GENERATED not in p.parents and p.name != "__init__.py"]


def test_no_two_modules_share_a_name() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        by_name[path.name].append(str(path.relative_to(PLACEMENT.parent)))
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}


def test_no_module_of_the_service_or_the_state_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(PLACEMENT.parent)): lines
        for layer in ("service", "state")
        for path in (PLACEMENT / layer).rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
