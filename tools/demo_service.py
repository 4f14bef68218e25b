"""The demo service as a child process, for the tools that drive it (``api_examples``, ``abuse_placement``)."""

from __future__ import annotations

import signal
import subprocess
import sys

READY = "The service keeps running on "


def start_demo(*extra: str) -> tuple[subprocess.Popen[str], str]:
    """``kubenexus-placement serve --demo`` on a free loopback port; the process and the address it printed."""
    command = [sys.executable, "-m", "placement.main", "serve", "--demo", "--listen", "127.0.0.1:0", *extra]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(READY):
            return process, line[len(READY) :].split(". Try")[0]
    raise SystemExit(f"the demo service exited before it was ready (status {process.wait()})")


def stop_demo(process: subprocess.Popen[str]) -> None:
    """SIGTERM, as a user's Ctrl-C: the service stops gracefully."""
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    if process.stdout is not None:
        process.stdout.close()
