"""The product's programs as real processes for the ``cluster`` tests: ``kubenexus-placement serve``, ``binder``
and ``extender``, each with its own kubeconfig (the ServiceAccount identity it has in production), JSON logs
collected from stderr so that a test can wait for a line, and a clean stop (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import wait_until
from tests.control_plane import free_port, stop_group

REPO = Path(__file__).resolve().parent.parent
# Every wait below is a deadline on a condition, never a fixed sleep; generous for a loaded 2-core machine.
READY_TIMEOUT_S = 90.0


class Program:
    """One process of the product: started at construction, its stderr JSON lines kept."""

    def __init__(self, name: str, args: list[str], *, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.args = args
        self.env = env
        self._lines: list[str] = []
        self._out: list[str] = []
        self._start()

    def _start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "placement.main" if self.name != "agent" else "agent.main", *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **(self.env or {})},
            start_new_session=True,
        )
        self._threads = [
            threading.Thread(target=self._read, args=(self.process.stderr, self._lines), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stdout, self._out), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def restart(self) -> None:
        """A rolling restart: stopped (SIGTERM), then the same command again (the same address and identity);
        the earlier process's log lines are kept, the new one's follow them."""
        self.stop()
        self._start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def logs(self) -> list[dict[str, Any]]:
        records = []
        for line in list(self._lines):
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line))
        return records

    def find(self, message: str, **fields: Any) -> dict[str, Any] | None:
        for record in self.logs():
            if record.get("message") == message and all(record.get(k) == v for k, v in fields.items()):
                return record
        return None

    def wait_for(self, message: str, timeout_s: float = READY_TIMEOUT_S, **fields: Any) -> dict[str, Any]:
        def seen() -> bool:
            if self.process.poll() is not None and self.find(message, **fields) is None:
                raise AssertionError(f"{self.name} exited ({self.process.returncode}):\n{self.text()[-3000:]}")
            return self.find(message, **fields) is not None

        wait_until(seen, timeout_s=timeout_s, what=f"{self.name}: {message!r}")
        found = self.find(message, **fields)
        assert found is not None
        return found

    def text(self) -> str:
        return "".join(self._lines)

    def stdout(self) -> str:
        return "".join(self._out)

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        stop_group(self.process, sig, timeout_s)
        for thread in self._threads:
            thread.join(10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return self.process.returncode

    def kill(self) -> None:
        """A crash: SIGKILL, nothing released (a Lease is left to expire)."""
        self.stop(signal.SIGKILL)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return 0


class Service(Program):
    """``kubenexus-placement serve`` on a free loopback port, with its metrics endpoint (``/readyz``)."""

    def __init__(self, kubeconfig: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        super().__init__("serve", [
            "serve", f"--listen=127.0.0.1:{self.port}", f"--metrics-address=127.0.0.1:{self.metrics_port}",
            f"--kubeconfig={kubeconfig}", "--watch-batch-ms=0", *extra,
        ], env=env)  # fmt: skip

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def readyz(self) -> int:
        return http_status(f"http://127.0.0.1:{self.metrics_port}/readyz")

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> Service:
        self.wait_for("placement service listening", timeout_s=timeout_s)
        wait_until(lambda: self.readyz() == 200, timeout_s=timeout_s, what="the service's /readyz to answer 200")
        return self

    def metric(self, sample: str) -> float:
        return metric(f"http://127.0.0.1:{self.metrics_port}", sample)


def metric(base: str, sample: str) -> float:
    """One sample's value from the Prometheus text at ``base``/metrics (0 when absent)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return 0.0


def agent_logs(stderr: str) -> list[dict[str, Any]]:
    """The agent's own JSON log lines from a stream it shares with others (pytest's captured stderr)."""
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("logger", "").startswith("kubenexus")]
