"""A benchmark run on an earlier commit and on this tree, alternately, in one session, figures side by side.

``python -m benchmarks.side_by_side --base REV [--rounds 2] -- benchmarks.placement_service [ARGS...]``
checks ``REV`` out into a git worktree beside the system's temporary files (once; reused after), then runs
``python -m MODULE ARGS`` there and here alternately, ``--rounds`` times each (base first), so both see the
machine in the same state, which on a shared 2-core machine drifts by more than most changes. Each run's
output is printed whole; then every line both printed is shown once with its numbers as
``base | this tree`` per round: a line is matched by its text with the numbers taken out.

The shared data (``KUBENEXUS_SHARED_DATA``, default ``../shared/data`` from this tree) is given to both runs,
so a worktree elsewhere reads the same captures.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A figure: a number not glued to a word (p99 is a name), or a table's "met" cell.
_NUMBER = re.compile(r"(?<![A-Za-z_\d])-?\d[\d,]*(?:\.\d+)?|(?<=\| )(?:yes|NO)(?= \|)")


def worktree(revision: str) -> Path:
    """A checkout of ``revision`` (made once, then reused)."""
    commit = _git("rev-parse", "--verify", f"{revision}^{{commit}}").strip()
    path = Path(tempfile.gettempdir()) / f"kubenexus-base-{commit[:12]}"
    if not (path / ".git").exists():
        _git("worktree", "add", "--detach", str(path), commit)
    return path


def run(tree: Path, module: str, args: Sequence[str]) -> str:
    """``python -m module args`` with ``tree``'s packages first on the path."""
    environment = dict(os.environ, PYTHONPATH=str(tree))
    environment.setdefault("KUBENEXUS_SHARED_DATA", str((ROOT.parent / "shared" / "data").resolve()))
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=tree, env=environment, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"{module} failed in {tree} (exit status {done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def side_by_side(base: list[str], current: list[str]) -> list[str]:
    """Each line template printed in every run, with its numbers per round: ``base | current``."""

    def templates(output: str) -> dict[str, list[str]]:
        """Each line's figures by its template; the n-th line of one template is its own (table rows)."""
        found: dict[str, list[str]] = {}
        for line in output.splitlines():
            numbers = _NUMBER.findall(line)
            if numbers:
                template = _NUMBER.sub("#", line)
                seen = sum(1 for key in found if key.split("\0")[0] == template)
                found[f"{template}\0{seen}"] = numbers
        return found

    base_runs, current_runs = [templates(o) for o in base], [templates(o) for o in current]
    lines = []
    for template in current_runs[0]:
        if not all(template in runs for runs in (*base_runs, *current_runs)):
            continue
        columns = []
        for base_run, current_run in zip(base_runs, current_runs, strict=True):
            pairs = zip(base_run[template], current_run[template], strict=False)
            columns.append(", ".join(f"{b} | {c}" if b != c else b for b, c in pairs))
        lines.append(
            f"{template.split(chr(0))[0].strip()}\n    "
            + "\n    ".join(f"round {n + 1}: {c}" for n, c in enumerate(columns))
        )
    return lines


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare with (e.g. the commit before a change)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each tree, alternately (default: %(default)s)")
    parser.add_argument("module", help="the benchmark module, e.g. benchmarks.placement_service")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments (after --)")
    args = parser.parse_args(argv)
    module_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    base_tree = worktree(args.base)
    base: list[str] = []
    current: list[str] = []
    for round_number in range(1, args.rounds + 1):
        for label, tree, outputs in (("base " + args.base, base_tree, base), ("this tree", ROOT, current)):
            output = run(tree, args.module, module_args)
            outputs.append(output)
            print(f"=== round {round_number}, {label} ({tree}) ===\n{output}", flush=True)
    print(f"=== side by side: {args.base} | this tree ===")
    print("\n".join(side_by_side(base, current)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
