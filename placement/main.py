"""``kubenexus-placement``: command-line wiring of the placement service."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from agent import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubenexus-placement",
        description="Topology-aware placement service for GPU Kubernetes clusters.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)
    print("kubenexus-placement: no service commands in this version; see kubenexus-agent", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
