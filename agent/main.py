# PYTHON_ARGCOMPLETE_OK (argcomplete's marker: shell completion may run this entry point)
"""``kubenexus-agent``: command-line wiring only (flags, output, exit codes).

``run`` (the DaemonSet's loop) lives in ``agent.running`` and is imported only when asked for: it
loads the Kubernetes client and Prometheus, which ``discover`` does not need and should not pay for.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence

import argcomplete

from agent.discovery import UnusableHostRoot, discover
from agent.hostfs import HostFS
from agent.sources.nvml import load_nvml
from kubenexus import __version__
from kubenexus.topology.json_codec import dumps
from kubenexus.topology.model import NodeTopology
from kubenexus.topology.table import render_table_with_links
from kubenexus.topology.topo_matrix import TopoParseError, parse_topo_matrix, render_topo_matrix

EXIT_USAGE = 2
EXIT_INTERNAL = 70
_FORMAT_HELP = (
    "table: NUMA cells, GPUs and the link matrix for people; json: the lossless model; topo: `nvidia-smi topo -m`"
)

RENDERERS: dict[str, Callable[[NodeTopology], str]] = {
    "table": render_table_with_links,
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
    discover_cmd.add_argument(
        "--format", choices=sorted(RENDERERS), default="table", help=_FORMAT_HELP + " (default: %(default)s)"
    )
    discover_cmd.add_argument("--no-nvml", action="store_true", help="find GPUs through sysfs only")

    import_cmd = commands.add_parser(
        "import-topo", help="read `nvidia-smi topo -m` output (a file, or - for stdin) and print it as a topology"
    )
    import_cmd.add_argument("file", metavar="FILE", help="a saved `nvidia-smi topo -m` output, or - for stdin")
    import_cmd.add_argument(
        "--format", choices=sorted(RENDERERS), default="json", help=_FORMAT_HELP + " (default: %(default)s)"
    )

    _add_run_command(commands)
    return parser


def _add_run_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run_cmd = commands.add_parser(
        "run",
        help="discover this node's topology and publish it to Kubernetes, periodically (the DaemonSet's command)",
        description="Discover -> kubelet availability -> encode -> publish, every --interval seconds. "
        "Logs are JSON lines on stderr; --dry-run prints the writes on stdout instead of sending them.",
    )
    run_cmd.add_argument("--node-name", metavar="NAME", help="this node's name (default: $NODE_NAME)")
    run_cmd.add_argument(
        "--host-root",
        default="/",
        metavar="DIR",
        help="where this machine's /sys, /proc and kubelet files are mounted (default: /)",
    )
    run_cmd.add_argument("--no-nvml", action="store_true", help="find GPUs through sysfs only")
    run_cmd.add_argument(
        "--mode", choices=["labels", "nrt", "both"], default="both", help="what to publish (default: both)"
    )
    run_cmd.add_argument(
        "--interval",
        type=_seconds,
        default=60.0,
        metavar="S",
        help="seconds between discoveries (default: %(default)s)",
    )
    run_cmd.add_argument(
        "--resync",
        type=_seconds,
        default=3600.0,
        metavar="S",
        help="read back and repair the published data at least this often, even if nothing changed "
        "(default: %(default)s)",
    )
    run_cmd.add_argument("--once", action="store_true", help="one pass, then exit (status 1 if publishing failed)")
    run_cmd.add_argument("--dry-run", action="store_true", help="print the writes as JSON instead of sending them")
    run_cmd.add_argument(
        "--kubelet-config",
        default="/var/lib/kubelet/config.yaml",
        metavar="PATH",
        help="the kubelet's configuration file, a host path under --host-root (default: %(default)s)",
    )
    run_cmd.add_argument(
        "--topology-manager-policy",
        metavar="POLICY",
        help="override the kubelet file's Topology Manager policy (default: the file's)",
    )
    run_cmd.add_argument(
        "--topology-manager-scope",
        metavar="SCOPE",
        help="override the kubelet file's Topology Manager scope (default: the file's)",
    )
    run_cmd.add_argument(
        "--pod-resources-socket",
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        metavar="PATH",
        help="the kubelet PodResources socket; empty to publish capacity only (default: %(default)s)",
    )
    run_cmd.add_argument(
        "--allocatable-refresh",
        type=_seconds,
        default=60.0,
        metavar="S",
        help="re-read the kubelet (allocatable resources, pod assignments) this often between discoveries: "
        "device plugins register late (default: %(default)s)",
    )
    run_cmd.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /readyz here, e.g. :9400 (default: off)",
    )
    run_cmd.add_argument(
        "--kubeconfig", metavar="FILE", help="cluster credentials (default: the pod's service account)"
    )
    run_cmd.add_argument(
        "--api-retries",
        type=int,
        default=5,
        metavar="N",
        help="attempts per API write before a pass gives up (backoff 0.5 s doubling to 30 s, jittered; "
        "default: %(default)s)",
    )


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if args.command == "run":
        return _run_agent(args, parser)
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


def _run_agent(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    node_name = args.node_name or os.environ.get("NODE_NAME")
    if not node_name:
        parser.error("run needs --node-name or the NODE_NAME environment variable")
    if args.api_retries < 1:
        parser.error("--api-retries must be at least 1")
    from agent.running import RunOptions, run_agent  # noqa: PLC0415  (see the module docstring)

    options = RunOptions(
        node_name=node_name,
        host_root=args.host_root,
        nvml=not args.no_nvml,
        mode=args.mode,
        interval_s=args.interval,
        resync_s=args.resync,
        once=args.once,
        dry_run=args.dry_run,
        kubelet_config=args.kubelet_config,
        topology_manager_policy=args.topology_manager_policy,
        topology_manager_scope=args.topology_manager_scope,
        pod_resources_socket=args.pod_resources_socket or None,
        allocatable_refresh_s=args.allocatable_refresh,
        metrics_address=args.metrics_address,
        kubeconfig=args.kubeconfig,
        api_attempts=args.api_retries,
    )
    return run_agent(options, debug=args.debug)


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
