# PYTHON_ARGCOMPLETE_OK (argcomplete's marker: shell completion may run this entry point)
"""``kubenexus-placement``: command-line wiring of the placement service.

``serve`` builds an engine (over the cluster feed, or over the embedded demo cluster with ``--demo``),
starts the gRPC server and the metrics endpoint, and stops gracefully on SIGTERM or SIGINT. Log lines
are JSON on stderr. Expected failures (unreadable TLS files, an address in use, no cluster credentials)
exit with status 1 and one sentence; bad flags exit with status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import argcomplete
import yaml

from kubenexus import __version__
from kubenexus.http_endpoint import HttpEndpoint
from kubenexus.jsonlog import json_logging
from kubenexus.kube.lease_flags import add_lease_arguments
from kubenexus.topology import json_codec
from kubenexus.topology.model import NodeTopology
from placement.api.access import DEFAULT_WRITER
from placement.api.metrics import PlacementMetrics
from placement.api.server import PlacementServer, ServerOptions, TlsFiles
from placement.cluster.batches import DEFAULT_INTERVAL_S
from placement.core import kernel
from placement.core.domains import DEFAULT_LEVELS, TopologyLevelError, TopologyLevels, parse_topology_levels
from placement.core.dra.gpu_devices import NVIDIA_GPU_DRIVERS
from placement.core.workload_policies import (
    DEFAULT_POLICIES,
    PolicyConfigError,
    WorkloadPolicies,
    parse_workload_policies,
)
from placement.demo import build_demo_cluster, grpcurl_connection, run_demo
from placement.service.engine import PlacementEngine
from placement.service.framework.profile import Profile, ProfileError
from placement.service.gang_port import CoordinatedGangs
from placement.service.heap import settle_heap
from placement.shim.flags import add_binder_arguments, add_extender_arguments
from placement.sim.cli import add_simulate_command
from placement.state.cluster_index import ClusterIndex
from placement.state.driver_reservations import DriverReservations
from placement.state.gang_coordinator import DEFAULT_MAX_MEMBERS, GangConfig, GangCoordinator
from placement.state.nominations import Nominations
from placement.state.reservations import Reservations

log = logging.getLogger("kubenexus.placement")

_DISCOVERY_TIMEOUT_S = 60.0
_TICK_S = 1.0  # gang permit timeouts are seconds long (default 10 s)
_MAX_WATCH_BATCH_MS = 1000.0  # a batch window past a second would delay every event that long


_LOG_LEVELS = ("debug", "info", "warning", "error")
_DRIVER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class UsageError(Exception):
    """A flag combination that cannot work; main prints it and exits with status 2."""


class StartError(Exception):
    """The service cannot start (credentials, TLS files, the listen address); exit status 1."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubenexus-placement",
        description="Topology-aware placement service for GPU Kubernetes clusters.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gRPC placement service")
    serve.add_argument(
        "--listen", default="127.0.0.1:50051", metavar="HOST:PORT", help="gRPC address (default: %(default)s)"
    )
    serve.add_argument(
        "--metrics-address",
        default="",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (default: off)",
    )
    serve.add_argument(
        "--tls-cert", type=Path, metavar="PEM", help="server certificate, enables TLS (default: plaintext)"
    )
    serve.add_argument("--tls-key", type=Path, metavar="PEM", help="the server certificate's private key")
    serve.add_argument(
        "--tls-client-ca", type=Path, metavar="PEM", help="require client certificates signed by this CA (mTLS)"
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="serve a non-loopback address without client certificates (development only: anyone reaching "
        "the port may reserve capacity)",
    )
    serve.add_argument(
        "--writer-identity",
        action="append",
        metavar="NAME",
        help="client certificate CN allowed to call Reserve, Unreserve and PlaceGang; repeatable "
        f"(default: {DEFAULT_WRITER})",
    )
    serve.add_argument(
        "--admin-identity",
        action="append",
        default=[],
        metavar="NAME",
        help="client certificate CN that may also release reservations made by other clients; repeatable "
        "(default: none)",
    )
    source = serve.add_mutually_exclusive_group()
    source.add_argument(
        "--demo", action="store_true", help="serve an embedded demo cluster and schedule a sample mix on it"
    )
    source.add_argument("--kubeconfig", metavar="PATH", help="cluster credentials (default: in-cluster, then ~/.kube)")
    serve.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the file's current one)")
    add_lease_arguments(serve, lease_name="kubenexus-placement")
    # One replica run by hand needs no Lease; the Deployment passes --leader-elect.
    serve.set_defaults(leader_elect=False)
    serve.add_argument(
        "--max-gang-members",
        type=int,
        default=DEFAULT_MAX_MEMBERS,
        metavar="N",
        help="refuse a pod group of more members (default: %(default)s, planned in ~0.1 s over 1,000 nodes)",
    )
    serve.add_argument(
        "--topology-levels",
        default=DEFAULT_LEVELS.flag_value(),
        metavar="NAME=KEY[,KEY...][;...]",
        help="topology levels a pod group may require or prefer to share, nearest first: each a name and the "
        "node label keys giving a node's domain, the first one present winning (default: %(default)s)",
    )
    serve.add_argument(
        "--dra-gpu-drivers",
        default=",".join(NVIDIA_GPU_DRIVERS),
        metavar="NAME[,NAME...]",
        help="DRA drivers whose devices are GPUs, joined to the agent's topology and scored by NVLink and NUMA "
        "(default: %(default)s); other drivers' devices are allocated without topology",
    )
    serve.add_argument(
        "--disable-plugins",
        metavar="NAMES",
        default="",
        help="plugins the profile leaves out, comma-separated: Gangs (no PlaceGang or Permit) and Preemption (no "
        "Preempt or CheckEviction); the others cannot be left out (default: none; the demo runs them all)",
    )
    serve.add_argument(
        "--workload-policies",
        type=Path,
        metavar="FILE",
        help="workload policies (YAML or JSON): score weights, which pods are services, tenants' tiers and "
        "node pools (default: services spread, batch packed, no tiers; docs/placement.md)",
    )
    serve.add_argument(
        "--watch-batch-ms",
        type=float,
        default=DEFAULT_INTERVAL_S * 1000,
        metavar="MS",
        help="apply watch events in batches gathered over this many ms, one lock hold each (default: %(default)g; "
        "0 applies each event as it arrives)",
    )
    kernel_choice = serve.add_mutually_exclusive_group()
    kernel_choice.add_argument(
        "--compiled-kernel",
        action="store_true",
        help="when the admission kernel was not built ahead of time (python -m placement.core.kernel.ahead_of_time), "
        "compile it with numba at start (extra 'compiled'; about 110 MB more memory, docs/benchmarks.md); without "
        "either the numpy path answers, with a warning. By default the kernel built ahead of time is used where "
        "there is one, else the numpy path",
    )
    kernel_choice.add_argument(
        "--no-compiled-kernel",
        action="store_true",
        help="judge every node on the numpy path, even where the admission kernel was built ahead of time",
    )
    serve.add_argument(
        "--grace",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds the calls in flight get to finish on SIGTERM (default: %(default)s)",
    )
    add_extender_arguments(commands.add_parser("extender", help="kube-scheduler HTTP extender (a client of serve)"))
    add_binder_arguments(
        commands.add_parser("binder", help="secondary scheduler binding pods with schedulerName kubenexus-scheduler")
    )
    add_simulate_command(commands)
    for command in ("serve", "extender", "binder", "simulate"):
        commands.choices[command].add_argument(
            "--log-level",
            default="info",
            choices=_LOG_LEVELS,
            help="the least severe JSON log lines written to stderr (default: %(default)s)",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    with json_logging(sys.stderr, level=getattr(logging, args.log_level.upper())):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if args.command == "simulate":
        return int(args.handler(args))
    if args.command in ("extender", "binder"):
        # Loaded only here: the shims need the Kubernetes client, `serve --demo` does not.
        from placement.shim.commands import run_binder, run_extender  # noqa: PLC0415

        return run_extender(args) if args.command == "extender" else run_binder(args)
    try:
        return asyncio.run(_serve(args))
    except UsageError as error:
        print(f"kubenexus-placement: {error}", file=sys.stderr)
        return 2
    except StartError as error:
        print(f"kubenexus-placement: {error}", file=sys.stderr)
        return 1


def _tls(args: argparse.Namespace) -> TlsFiles | None:
    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca is not None:
            raise UsageError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise UsageError("--tls-cert and --tls-key go together")
    return TlsFiles(cert=args.tls_cert, key=args.tls_key, client_ca=args.tls_client_ca)


async def _serve(args: argparse.Namespace) -> int:
    try:
        options = ServerOptions(
            listen=args.listen,
            tls=_tls(args),
            insecure=args.insecure,
            writers=frozenset(args.writer_identity or (DEFAULT_WRITER,)),
            admins=frozenset(args.admin_identity),
            grace_s=args.grace,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    stop_event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop_event.set)

    policies = workload_policies(args.workload_policies)
    profile = plugin_profile(args.disable_plugins)
    engine, cleanup = (_demo_engine(), _nothing) if args.demo else _cluster_engine(args, profile)
    if not args.no_compiled_kernel:  # after the flags were all judged: a usage error prints alone
        compiled_kernel(allow_jit=args.compiled_kernel)
    engine.index.policy_scores.policies = policies
    log.info("plugins per extension point", extra={"points": engine.pipeline.points()})
    try:
        metrics = PlacementMetrics(engine)
        if args.metrics_address:
            try:
                HttpEndpoint(
                    args.metrics_address,
                    metrics.registry,
                    ready=engine.is_synced,
                    not_ready="the cluster cache is not synced",
                ).start()
            except (OSError, ValueError) as error:
                raise StartError(f"cannot serve metrics on {args.metrics_address}: {error}") from None
        server = PlacementServer(engine, options, metrics=metrics)
        try:
            await server.start()
        except ValueError as error:
            raise StartError(str(error)) from None
        if args.demo:
            address = f"{args.listen.rpartition(':')[0]}:{server.port}"  # the bound port when asked for :0
            tls, mutual = options.tls is not None, args.tls_client_ca is not None
            connection = grpcurl_connection(tls=tls, client_certificates=mutual)
            await loop.run_in_executor(
                None, lambda: run_demo(engine, out=sys.stdout, listen_address=address, connection=connection)
            )
            sys.stdout.flush()
        ticker = asyncio.create_task(_tick_forever(engine))
        await stop_event.wait()
        ticker.cancel()
        log.info("stopping: calls in flight get the grace period", extra={"grace_s": args.grace})
        await server.stop()
    finally:
        cleanup()
    return 0


async def _tick_forever(engine: PlacementEngine) -> None:
    """Gang permits expire and waiting gangs are retried even when no request arrives; the heap is settled
    once the cache first syncs."""
    loop = asyncio.get_running_loop()
    settled = False
    while True:
        await asyncio.sleep(_TICK_S)
        if not settled and engine.is_synced():
            settle_heap()
            settled = True
        try:
            await loop.run_in_executor(None, engine.tick)
        except Exception:  # a bug in one tick must not stop the next: logged with its traceback
            log.exception("gang tick failed")


def compiled_kernel(*, allow_jit: bool) -> bool:
    """The admission kernel on (True): the one built ahead of time where there is one, else with ``allow_jit``
    (``--compiled-kernel``) numba's. Off: a warning saying why where it was asked for, else an info line."""
    reason = kernel.enable(allow_jit=allow_jit)
    if reason is not None:
        report = log.warning if allow_jit else log.info
        report("the compiled admission kernel is off; the numpy path answers", extra={"reason": reason})
        return False
    log.info("the compiled admission kernel is on", extra={"kernel": kernel.active()})
    return True


def gpu_drivers(text: str) -> tuple[str, ...]:
    """``--dra-gpu-drivers``: DRA driver names (DNS subdomains, as the API server requires of a driver)."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    bad = [name for name in names if len(name) > 63 or not _DRIVER_NAME.fullmatch(name)]
    if not names or bad:
        raise UsageError(
            f"--dra-gpu-drivers {text!r}: each name must be a DNS subdomain of at most 63 characters "
            "(e.g. gpu.nvidia.com)"
        )
    return names


def topology_levels(text: str) -> TopologyLevels:
    """``--topology-levels``, checked before anything starts; a bad value is a usage error."""
    try:
        return parse_topology_levels(text)
    except TopologyLevelError as error:
        raise UsageError(f"--topology-levels: {error}") from None


def plugin_profile(names: str) -> Profile:
    """``--disable-plugins``, checked before anything starts; a bad value is a usage error."""
    try:
        return Profile.without(names.split(","))
    except ProfileError as error:
        raise UsageError(f"--disable-plugins: {error}") from None


def workload_policies(path: Path | None) -> WorkloadPolicies:
    """``--workload-policies``: the file read and checked before anything starts; a bad one is a usage error."""
    if path is None:
        return DEFAULT_POLICIES
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"--workload-policies {path}: cannot read it: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise UsageError(f"--workload-policies {path}: not valid YAML or JSON: {_first_line(error)}") from None
    try:
        return parse_workload_policies(document)
    except PolicyConfigError as error:
        raise UsageError(f"--workload-policies {path}: {error}") from None


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _nothing() -> None:
    return None


def _demo_engine() -> PlacementEngine:
    return build_demo_cluster(discover_this_machine=_discover_this_machine, out=sys.stderr)


def _discover_this_machine() -> NodeTopology:
    """This machine's topology as the agent program reports it (``kubenexus-agent discover --format json``),
    read back with the shared model's codec: the two programs share the model, never each other's code."""
    here = os.path.dirname(sys.executable)
    agent = shutil.which("kubenexus-agent", path=os.pathsep.join((here, os.environ.get("PATH", ""))))
    if agent is None:
        raise RuntimeError("kubenexus-agent is not installed beside this program")
    result = subprocess.run(
        [agent, "discover", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=_DISCOVERY_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"discovery exited with status {result.returncode}")
    return json_codec.loads(result.stdout)


def _cluster_engine(args: argparse.Namespace, profile: Profile) -> tuple[PlacementEngine, Callable[[], None]]:
    # The Kubernetes client (30 MB) is loaded only for a real cluster, not for the demo.
    from kubenexus.kube.client import connect  # noqa: PLC0415
    from kubenexus.kube.errors import ApiUnavailable  # noqa: PLC0415
    from kubenexus.kube.leader import LeaderElector, LeaseConfig, PodLabel  # noqa: PLC0415
    from placement.cluster.feed import ClusterFeed  # noqa: PLC0415
    from placement.core.annotations import FIELD_MANAGER, LEADER_LABEL  # noqa: PLC0415

    try:
        gang_config = GangConfig(max_members=args.max_gang_members, levels=topology_levels(args.topology_levels))
    except ValueError as error:
        raise UsageError(str(error)) from None
    drivers = gpu_drivers(args.dra_gpu_drivers)
    if not 0 <= args.watch_batch_ms <= _MAX_WATCH_BATCH_MS:
        raise UsageError(
            f"--watch-batch-ms {args.watch_batch_ms:g}: accepted 0 (no batches) to {_MAX_WATCH_BATCH_MS:g}"
        )
    try:
        api = connect(args.kubeconfig, context=args.context, field_manager=FIELD_MANAGER)
    except ApiUnavailable as error:
        raise StartError(str(error)) from None
    index = ClusterIndex(gpu_drivers=drivers)
    reservations = Reservations(index)
    nominations = Nominations()
    gangs = None
    if profile.runs("Gangs"):
        gangs = CoordinatedGangs(GangCoordinator(index, reservations, config=gang_config, nominations=nominations))
    elector = None
    if args.leader_elect:
        try:
            config = LeaseConfig.from_flags(args)
        except ValueError as error:
            raise UsageError(str(error)) from None
        pod_namespace = os.environ.get("POD_NAMESPACE")
        label = PodLabel(pod_namespace, config.identity, LEADER_LABEL) if pod_namespace else None
        elector = LeaderElector(api, config, label_pod=label)
    engine = PlacementEngine(
        index=index,
        reservations=reservations,
        gangs=gangs,
        synced=lambda: feed.synced,
        leadership=elector,
        nominations=nominations,
        drivers=DriverReservations(index, reservations, levels=gang_config.levels),
        profile=profile,
    )
    feed = ClusterFeed(
        api,
        index,
        reservations,
        batch_interval_s=args.watch_batch_ms / 1000 or None,
        # The engine's view of pod changes: a bound or deleted preemptor's hold ends, then the gangs'.
        on_pod=engine.observe_pod,
        on_nominated=engine.observe_nomination,
        on_node=None if gangs is None else gangs.coordinator.observe_node,
        on_node_removed=None if gangs is None else gangs.coordinator.forget_node,
    )
    feed.start()
    if elector is not None:
        elector.start()

    def cleanup() -> None:
        if elector is not None:
            elector.stop()
        feed.stop()

    return engine, cleanup


if __name__ == "__main__":
    sys.exit(main())
