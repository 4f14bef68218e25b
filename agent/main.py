"""``kubenexus-agent``: command-line wiring only (flags, output, exit codes)."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence

from agent import __version__
from agent.discovery import UnusableHostRoot, discover
from agent.hostfs import HostFS
from agent.sources.nvml import load_nvml
from agent.topology.json_codec import dumps
from agent.topology.model import NodeTopology
from agent.topology.table import render_table
from agent.topology.topo_matrix import TopoParseError, parse_topo_matrix, render_topo_matrix

EXIT_USAGE = 2
EXIT_INTERNAL = 70

RENDERERS: dict[str, Callable[[NodeTopology], str]] = {
    "table": render_table,
    "json": lambda topology: dumps(topology, indent=2) + "\n",
    "topo": render_topo_matrix,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubenexus-agent", description="Discover and publish this node's NUMA, memory, PCIe and GPU topology."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    commands = parser.add_subparsers(dest="command", required=True)

    discover_cmd = commands.add_parser("discover", help="discover this host's topology and print it")
    discover_cmd.add_argument(
        "--host-root", default="/", metavar="DIR", help="directory holding the host's sys/ and proc/ (default: /)"
    )
    discover_cmd.add_argument("--format", choices=sorted(RENDERERS), default="table")
    discover_cmd.add_argument("--no-nvml", action="store_true", help="find GPUs through sysfs only")

    import_cmd = commands.add_parser(
        "import-topo", help="read `nvidia-smi topo -m` output (a file, or - for stdin) and print it as a topology"
    )
    import_cmd.add_argument("file", metavar="FILE")
    import_cmd.add_argument("--format", choices=sorted(RENDERERS), default="json")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        topology = _run(args)
    except (UnusableHostRoot, TopoParseError, OSError) as error:
        print(f"kubenexus-agent: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # a bug of ours: one line for the user, the traceback on request
        if args.debug:
            traceback.print_exc()
        print(f"kubenexus-agent: internal error: {error!r} (rerun with --debug for details)", file=sys.stderr)
        return EXIT_INTERNAL
    sys.stdout.write(RENDERERS[args.format](topology))
    return 0


def _run(args: argparse.Namespace) -> NodeTopology:
    if args.command == "discover":
        fs = HostFS(args.host_root)
        nvml = None
        if not args.no_nvml:
            nvml, _ = load_nvml()
        return discover(fs, nvml=nvml)
    if args.file == "-":
        text = sys.stdin.read()
    else:
        with open(args.file, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    return parse_topo_matrix(text)


if __name__ == "__main__":
    sys.exit(main())
