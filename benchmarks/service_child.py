"""A benchmark's placement service in a child process, so that the client's work is not the service's.

The child is ``python -m MODULE ROLE...``; it prints ``READY <port>`` once it serves on 127.0.0.1 and stops
when its stdin closes, printing its last figures.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import grpc

from placement.api.v1 import placement_pb2_grpc

READY = "READY"


class ServiceChild:
    """The child process, a channel to it and the Placement stub."""

    def __init__(self, module: str, role: Sequence[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *role], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        if not line or line[0] != READY:
            self.process.kill()
            raise SystemExit(f"the service did not start (exit status {self.process.wait()})")
        self.address = f"127.0.0.1:{line[1]}"
        self.channel = grpc.insecure_channel(self.address)
        self.stub: Any = placement_pb2_grpc.PlacementStub(self.channel)

    def finish(self, timeout_s: float) -> str:
        """Stops the child (closing its stdin); what it printed last, "" when it had to be killed."""
        self.channel.close()
        try:
            output, _ = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return ""
        return str(output).strip()
