"""One long-lived oracle program (tests/oracles/<kind>/, built by tools.oracles) answering cases over a pipe.

``Oracle.ask(case)`` writes the case as one JSON line and reads upstream's answer line: its ``result``, or
``OracleRefused`` carrying the ``error`` text upstream's code gave (a refused object, a panic). The program
keeps running between cases, so thousands of cases take seconds; the session fixtures in tests/conftest.py
start one per kind.

Deep mode: ``KUBENEXUS_ORACLE_CASES=100000 python -m pytest -m oracle`` runs that many random cases per
property instead of the fixed-seed lane's ``FIXED_CASES`` (CI); ``oracle_settings()`` gives the matching
hypothesis settings.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from hypothesis import HealthCheck, settings

FIXED_CASES = 3000
DEEP_CASES = int(os.environ.get("KUBENEXUS_ORACLE_CASES", "0") or 0)


# How long a case may take: upstream's code answers in milliseconds, seconds on a loaded machine; a case it
# spins on (the kubelet oracle met some in random runs) must not hang the suite.
ASK_TIMEOUT_S = 30.0


class OracleRefused(Exception):
    """Upstream's code refused the case (or panicked on it); the message is its text."""


class OracleTimedOut(Exception):
    """Upstream's code gave no answer within ``ASK_TIMEOUT_S``: the program was killed and starts afresh."""


class Oracle:
    """``restart_every``: start the program afresh after that many cases (the kubelet's managers leave a
    goroutine per case behind, which a 100,000-case run would pile up)."""

    def __init__(self, program: Path, *, restart_every: int | None = None) -> None:
        self.program = program
        self.restart_every = restart_every
        self._asked = 0
        self._process = self._start()

    def _start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.program)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def ask(self, case: dict[str, Any]) -> Any:
        if self.restart_every is not None and self._asked >= self.restart_every:
            self.close()
            self._process, self._asked = self._start(), 0
        self._asked += 1
        stdin, stdout = self._pipes()
        stdin.write(json.dumps(case, separators=(",", ":")) + "\n")
        stdin.flush()
        ready, _, _ = select.select([stdout], [], [], ASK_TIMEOUT_S)
        if not ready:
            kept = self._keep_stuck(case)
            self.close()
            self._process, self._asked = self._start(), 0
            raise OracleTimedOut(
                f"{self.program.name} oracle gave no answer within {ASK_TIMEOUT_S:g} s; the case and the "
                f"program's goroutines: {kept}"
            )
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"{self.program.name} oracle exited ({self._process.poll()}): {self._stderr()}")
        answer = json.loads(line)
        if "error" in answer:
            raise OracleRefused(answer["error"])
        return answer.get("result")

    def _keep_stuck(self, case: dict[str, Any]) -> Path:
        """SIGQUIT makes a Go program print every goroutine's stack and exit: kept with the case, to tell a
        case upstream's code spins on from a state the program carried over from earlier cases."""
        self._process.send_signal(signal.SIGQUIT)
        try:
            _, stacks = self._process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            _, stacks = self._process.communicate()
        folder = Path(tempfile.gettempdir()) / "kubenexus-oracle-stuck"
        folder.mkdir(exist_ok=True)
        kept = folder / f"{self.program.name}-{os.getpid()}-{time.time_ns()}.json"
        kept.write_text(json.dumps({"case": case, "asked_since_start": self._asked, "goroutines": stacks}))
        return kept

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        return self._process.stdin, self._process.stdout

    def _stderr(self) -> str:
        if self._process.poll() is None or self._process.stderr is None:
            return ""
        return self._process.stderr.read()[-2000:]

    def close(self) -> None:
        stdin, stdout = self._pipes()
        stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        stdout.close()
        if self._process.stderr is not None:
            self._process.stderr.close()

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def oracle_settings(**overrides: Any) -> settings:
    """Hypothesis settings of an oracle property: the fixed-seed lane (``FIXED_CASES`` examples, derandomized)
    or, with ``KUBENEXUS_ORACLE_CASES`` set, that many random examples."""
    common: dict[str, Any] = {
        "deadline": None,
        "database": None,
        "suppress_health_check": list(HealthCheck),
        "print_blob": True,
    }
    common.update(overrides)
    if DEEP_CASES:
        return settings(**{"max_examples": DEEP_CASES, "derandomize": False, **common})
    return settings(**{"max_examples": FIXED_CASES, "derandomize": True, **common})
