"""Reads spread over replicas of the placement service: decisions per second for N = 1, 2, 4 replicas.

``python -m benchmarks.placement_replicas`` starts the largest N replicas as child processes on 127.0.0.1
(``benchmarks.placement_service.Service``: each the same cluster of the fixture machines, holding still),
then, for each N, drives the first N of them for ``--seconds`` from ``--clients`` threads of this process,
``--rounds`` times over (interleaved; the median run of each is shown).
A decision is a Filter then a Score of a 4-GPU pod naming every node (``placement_service.decide``), sent
over one channel to ``ipv4:`` the N ports with the extender's read service config
(``placement.shim.client.read_service_config``: ``round_robin``, health checks, retries): each call goes to
the next replica, as the extender's calls go over the headless Service's addresses.

Before the N runs, the previous routing: every call to one replica over a plain channel (as the extender
called the leader before reads were spread), measured in the same run.

Figures per N: decisions per second and the growth over one replica; the CPU time (user + system, from
``psutil``) each replica and this client process spent per decision. A replica's Python work runs on one
core at a time, so a replica saturates at 1000 / (its CPU ms per decision) decisions a second: with a core
for each replica, N replicas sharing the work evenly serve N x 1000 / (the replicas' CPU ms per decision,
all together). That is the prediction printed for a machine with more cores; on this one, replicas and
clients share its few cores, and the figure cannot grow much with N.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
import psutil

from benchmarks.placement_service import Service, back_to_back, decide, gpu_pod, node_names
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc
from placement.shim.client import read_service_config

DEFAULT_REPLICAS = (1, 2, 4)
PREVIOUS = 0  # ReplicaFigures.replicas of the previous routing: one replica, a plain channel


@dataclass(frozen=True)
class ReplicaFigures:
    """One run: ``replicas`` children answering (``PREVIOUS``: one, over a plain channel, as before)."""

    replicas: int
    decisions_per_s: float
    replica_cpu_ms: tuple[float, ...]  # each replica's CPU time per decision of the whole run
    client_cpu_ms: float  # this process's CPU time per decision (the clients' threads, gRPC's)
    busy_cores: float  # CPU seconds of the replicas and the client per wall second: what the run used

    @property
    def service_cpu_ms(self) -> float:
        """The replicas' CPU time per decision, all together."""
        return sum(self.replica_cpu_ms)

    @property
    def predicted_decisions_per_s(self) -> float:
        """With a core for each replica (and the clients elsewhere): each replica saturates at one core."""
        answering = max(1, self.replicas)
        return answering * 1000 / self.service_cpu_ms if self.service_cpu_ms else 0.0


def run(nodes: int, replicas: Sequence[int], seconds: float, clients: int, *, rounds: int = 1) -> list[ReplicaFigures]:
    """The previous routing, then one run per count in ``replicas``, each ``seconds`` long; all of them
    ``rounds`` times over, interleaved (a load that comes and goes touches every count alike), keeping each
    one's median run by decisions per second. The replicas are started once (the largest count); idle
    replicas cost nothing."""
    if not replicas or min(replicas) < 1:
        raise ValueError(f"replica counts {list(replicas)}: give one or more positive counts")
    if rounds < 1:
        raise ValueError(f"rounds {rounds}: give a positive number")
    services: list[Service] = []
    try:
        # Each child builds its cluster on start: start them side by side.
        started: list[Service | BaseException] = []

        def start() -> None:
            try:
                started.append(Service(nodes))
            except BaseException as error:  # raised again below, on the caller's thread
                started.append(error)

        threads = [threading.Thread(target=start) for _ in range(max(replicas))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        services = [child for child in started if isinstance(child, Service)]
        failed = [error for error in started if not isinstance(error, Service)]
        if failed:
            raise failed[0]
        request = pb.FilterRequest(pod=gpu_pod(), node_names=node_names(nodes))
        runs: list[list[ReplicaFigures]] = []
        for _ in range(rounds):
            figures = [_drive(services[:1], request, seconds, clients, balanced=False)]
            figures += [_drive(services[:count], request, seconds, clients, balanced=True) for count in replicas]
            runs.append(figures)
        return [_median(list(same)) for same in zip(*runs, strict=True)]
    finally:
        for service in services:
            service.close()


def _drive(
    services: Sequence[Service], request: pb.FilterRequest, seconds: float, clients: int, *, balanced: bool
) -> ReplicaFigures:
    if balanced:
        target = "ipv4:" + ",".join(service.address for service in services)
        options = [("grpc.service_config", read_service_config()), ("grpc.enable_retries", 1)]
        channel = grpc.insecure_channel(target, options=options)
    else:
        channel = grpc.insecure_channel(services[0].address)
    stub = placement_pb2_grpc.PlacementStub(channel)
    try:
        # Warm: the channel connected to every replica, and each replica has judged the pod's shape.
        for _ in range(20 * len(services)):
            decide(stub, request)
        replica_processes = [psutil.Process(service.process.pid) for service in services]
        client_process = psutil.Process()
        replicas_before = [_cpu_s(process) for process in replica_processes]
        client_before = _cpu_s(client_process)
        done, elapsed = back_to_back(stub, request, clients, seconds)
        decisions = max(done, 1)
        replica_cpu_s = [_cpu_s(p) - before for p, before in zip(replica_processes, replicas_before, strict=True)]
        client_cpu_s = _cpu_s(client_process) - client_before
    finally:
        channel.close()
    return ReplicaFigures(
        replicas=len(services) if balanced else PREVIOUS,
        decisions_per_s=done / elapsed,
        replica_cpu_ms=tuple(cpu * 1000 / decisions for cpu in replica_cpu_s),
        client_cpu_ms=client_cpu_s * 1000 / decisions,
        busy_cores=(sum(replica_cpu_s) + client_cpu_s) / elapsed,
    )


def _median(runs: list[ReplicaFigures]) -> ReplicaFigures:
    return sorted(runs, key=lambda figures: figures.decisions_per_s)[len(runs) // 2]


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def print_figures(
    figures: Sequence[ReplicaFigures], *, nodes: int, clients: int, seconds: float, rounds: int = 1
) -> None:
    cores = psutil.cpu_count() or 1
    print(
        f"Filter+Score over {nodes} nodes spread round robin over N replicas on loopback, {clients} client "
        f"threads in one process, {seconds:g} s per run, median of {rounds} interleaved round(s), {cores} CPUs "
        f"(load average now {_load()})"
    )
    print(
        f"{'replicas':<26} {'decisions/s':>11} {'vs before':>9} {'replica CPU ms/decision':>32} "
        f"{'client ms':>9} {'cores busy':>10} {'predicted/s':>11}"
    )
    previous = next((f for f in figures if f.replicas == PREVIOUS), None)
    for figure in figures:
        name = "1, before (plain channel)" if figure.replicas == PREVIOUS else str(figure.replicas)
        growth = f"{figure.decisions_per_s / previous.decisions_per_s:.2f}x" if previous else "-"
        each = " + ".join(f"{ms:.2f}" for ms in figure.replica_cpu_ms)
        print(
            f"{name:<26} {figure.decisions_per_s:>11.0f} {growth:>9} {each:>24} = {figure.service_cpu_ms:>5.2f} "
            f"{figure.client_cpu_ms:>9.2f} {figure.busy_cores:>10.2f} {figure.predicted_decisions_per_s:>11.0f}"
        )
    print(
        "predicted/s: N x 1000 / (the replicas' CPU ms per decision, together), what N replicas serve with a "
        "core each and the clients elsewhere (a replica's Python work uses one core at a time)."
    )
    if cores < 2 * max(f.replicas for f in figures) + 1:
        print(
            f"On this machine the {max(f.replicas for f in figures)} replicas and the clients share {cores} "
            "cores: throughput cannot grow much with N here; the CPU per decision is what carries over."
        )


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in psutil.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument(
        "--replicas",
        type=int,
        nargs="+",
        default=list(DEFAULT_REPLICAS),
        metavar="N",
        help="replica counts (default: %(default)s)",
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each run (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=4, help="client threads (default: %(default)s)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds over every count; the median is shown (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        figures = run(args.nodes, args.replicas, args.seconds, args.clients, rounds=args.rounds)
    except ValueError as error:
        parser.error(str(error))
    print_figures(figures, nodes=args.nodes, clients=args.clients, seconds=args.seconds, rounds=args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
