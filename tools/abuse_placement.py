"""Try the placement service as a careless or hostile client would, on loopback only, and say what happened.

    python -m tools.abuse_placement [--address 127.0.0.1:PORT]

Without ``--address`` it starts ``kubenexus-placement serve --demo --listen 127.0.0.1:0`` (the embedded demo
cluster), reads the port it printed, runs every case of ``CASES`` against it through the generated gRPC
stubs (``placement/api/v1``) and stops it. Each case prints one line: what was sent, the status code it
got (and the one expected), and whether the service's state is clean afterwards (nothing of a refused
request registered, ListNodes and a Filter still answering fast). Cases whose effect shows only later
(members that never become pods are dropped after the permit timeout) are checked at the end.

Bounded: only 127.0.0.1, ::1 or localhost is accepted as an address; every call has a deadline, the
whole run stops after ``BUDGET_S`` seconds (the cases not reached are listed as skipped), and the largest
request is one pod group at the service's cap on members. Exit status 0 when every case got the status
code it expected and left the service clean, else 1.

The authentication cases (``AUTH_CASES``) run against a second demo service started with mutual TLS
and throwaway certificates made with ``openssl`` (CA, server, and one client certificate per identity:
two writers, a reader): a client without a certificate, a reader reserving, a writer releasing another
writer's reservation. Before either service, the script checks that ``serve`` refuses to listen on an
open address without client certificates.

To add cases, append a ``Case`` to ``CASES`` (plaintext) or ``AUTH_CASES`` (mutual TLS): ``run`` gets the
``Target`` (its address, a channel and the stub; for mutual TLS also ``as_client(name)``, a stub that
presents that identity's certificate) and returns an ``Outcome``.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc
from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY
from placement.state.gang_coordinator import DEFAULT_MAX_MEMBERS, DEFAULT_PERMIT_TIMEOUT_S
from tools.demo_service import start_demo, stop_demo
from tools.throwaway_certificates import make_certificates

BUDGET_S = 55.0
CALL_TIMEOUT_S = 10.0
FAST_FILTER_S = 0.25  # a Filter over the demo's 19 nodes takes a few ms; this much means trouble
GARBAGE_PER_METHOD = 20
SERVICE = pb.DESCRIPTOR.services_by_name["Placement"]
NAMESPACE = "abuse"
OK, INVALID = grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT


@dataclass
class Target:
    """The service under test: its loopback address, a channel and the Placement stub; with mutual TLS, the
    folder of throwaway certificates."""

    address: str
    channel: grpc.Channel
    certificates: Path | None = None
    stub: Any = field(init=False)

    def __post_init__(self) -> None:
        self.stub = placement_pb2_grpc.PlacementStub(self.channel)

    def as_client(self, name: str | None) -> Any:
        """A stub presenting ``name``'s client certificate (None: TLS without one)."""
        assert self.certificates is not None, "an authentication case needs the mutual TLS service"
        channel = grpc.secure_channel(self.address, _credentials(self.certificates, name))
        return placement_pb2_grpc.PlacementStub(channel)


@dataclass(frozen=True)
class Outcome:
    sent: str  # what the case sent, in a few words
    code: grpc.StatusCode  # what the service answered (the worst of several calls)
    clean: str  # "" when the state is clean, else what is left over
    later: Callable[[Target], str] | None = None  # a check due after the permit timeout: "" when clean


@dataclass(frozen=True)
class Case:
    name: str
    expected: grpc.StatusCode
    run: Callable[[Target], Outcome]


# --- helpers -------------------------------------------------------------------------------------------


def loopback(address: str) -> str:
    """``address`` (HOST:PORT) when its host is 127.0.0.1, ::1 or localhost; SystemExit otherwise."""
    host, _, port = address.rpartition(":")
    if host.strip("[]") not in ("127.0.0.1", "::1", "localhost") or not port.isdigit():
        raise SystemExit(f"refusing {address!r}: only 127.0.0.1, ::1 or localhost (with a port) may be abused")
    return address


def call(method: Callable[..., Any], request: Any) -> tuple[grpc.StatusCode, Any]:
    try:
        return OK, method(request, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as error:
        failed: Any = error
        return failed.code(), failed.details()


# The demo's GPU nodes carry the taint a GPU node pool carries; GPU pods tolerate it, as they do there.
GPU_TOLERATION = pb.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


def pod(name: str, *, namespace: str = NAMESPACE, gpus: int = 1, labels: dict[str, str] | None = None) -> pb.Pod:
    resources = {"cpu": "4", "memory": "8Gi"} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    return pb.Pod(
        namespace=namespace,
        name=name,
        labels=labels or {},
        containers=[pb.Container(name="main", limits=resources)],
        tolerations=[GPU_TOLERATION] if gpus else [],
    )


def place(target: Target, name: str, members: list[pb.Pod], **group: Any) -> tuple[grpc.StatusCode, Any]:
    request = pb.PlaceGangRequest(group=pb.PodGroup(namespace=NAMESPACE, name=name, members=members, **group))
    return call(target.stub.PlaceGang, request)


def registered(target: Target, *names: str) -> str:
    """The members the service knows of among ``names`` ("" when none)."""
    known = []
    for name in names:
        code, answer = call(
            target.stub.PermitStatus, pb.PermitStatusRequest(pod=pb.PodRef(namespace=NAMESPACE, name=name))
        )
        if code != OK:
            known.append(f"PermitStatus {name}: {code.name}")
        elif answer.pod_group:
            known.append(f"{name} registered in {answer.pod_group}")
    return "; ".join(known)


def service_answers(target: Target) -> str:
    """ "" when ListNodes answers and a Filter answers within ``FAST_FILTER_S``, else what is wrong."""
    code, _ = call(target.stub.ListNodes, pb.ListNodesRequest())
    if code != OK:
        return f"ListNodes answered {code.name}"
    started = time.perf_counter()
    code, _ = call(target.stub.Filter, pb.FilterRequest(pod=pod("probe")))
    took = time.perf_counter() - started
    if code != OK:
        return f"Filter answered {code.name}"
    return "" if took <= FAST_FILTER_S else f"Filter took {took * 1000:.0f} ms"


def _unregistered_later(*names: str) -> Callable[[Target], str]:
    return lambda target: registered(target, *names)


# --- the cases -----------------------------------------------------------------------------------------


def partial_bad_gang(target: Target) -> Outcome:
    members = [pod("part-0"), pod("part-1"), pod("part-2", namespace="elsewhere")]
    code, _ = place(target, "partial", members)
    stranger = pod("part-2", labels={GROUP_NAME_KEY: "other", MIN_AVAILABLE_KEY: "3"})
    code2, _ = place(target, "partial", [pod("part-0"), pod("part-1"), stranger])
    worst = code if code != INVALID else code2
    return Outcome(
        "PlaceGang: 2 good members, then 1 in another namespace / naming another group",
        worst,
        registered(target, "part-0", "part-1"),
    )


def duplicate_members(target: Target) -> Outcome:
    code, _ = place(target, "dup", [pod("dup-0"), pod("dup-1"), pod("dup-1")])
    return Outcome("PlaceGang: members dup-0, dup-1, dup-1", code, registered(target, "dup-0", "dup-1"))


def abandoned_members(target: Target) -> Outcome:
    names = [f"ghost-{group}-{i}" for group in range(20) for i in range(2)]
    worst = OK
    for group in range(20):
        code, _ = place(target, f"ghost-{group}", [pod(f"ghost-{group}-{i}", gpus=8) for i in range(2)])
        worst = code if code != OK else worst
    return Outcome(
        "PlaceGang x20: 2 members each that never become pods",
        worst,
        "",
        later=_unregistered_later(*names),
    )


def max_size_gang(target: Target) -> Outcome:
    too_many = [pod(f"big-{i}", gpus=0) for i in range(DEFAULT_MAX_MEMBERS + 1)]
    over, _ = place(target, "too-big", too_many)
    at_cap = [pod(f"cap-{i}") for i in range(DEFAULT_MAX_MEMBERS)]
    started = time.perf_counter()
    code, answer = place(target, "at-cap", at_cap)
    took = time.perf_counter() - started
    worst = over if over != INVALID else (INVALID if code == OK else code)
    state = pb.GangState.Name(answer.state) if code == OK else str(answer)
    return Outcome(
        f"PlaceGang: {DEFAULT_MAX_MEMBERS + 1} members (over the cap: {over.name}); {DEFAULT_MAX_MEMBERS} members "
        f"(at the cap: {code.name} {state} in {took:.2f} s)",
        worst,
        registered(target, "big-0"),
        later=_unregistered_later("cap-0"),
    )


def huge_min_available(target: Target) -> Outcome:
    labels = {GROUP_NAME_KEY: "huge", MIN_AVAILABLE_KEY: "2147483648"}
    code, _ = place(target, "huge", [pod("huge-0", labels=labels)])
    return Outcome("PlaceGang: min-available label 2147483648", code, registered(target, "huge-0"))


def deep_pod_json(target: Target) -> Outcome:
    deep = "[" * 100_000 + "]" * 100_000
    code, _ = call(target.stub.Filter, pb.FilterRequest(pod_json=deep))
    group = pb.PodGroup(namespace=NAMESPACE, name="deep", members=[pod("deep-0")], members_json=[deep])
    code2, _ = call(target.stub.PlaceGang, pb.PlaceGangRequest(group=group))
    worst = code if code != INVALID else code2
    return Outcome("Filter and PlaceGang: pod_json nested 100,000 levels", worst, registered(target, "deep-0"))


def garbage_bytes(target: Target) -> Outcome:
    rng = random.Random(14)
    codes: dict[str, set[str]] = {}
    worst = INVALID
    for method in SERVICE.methods:
        response = getattr(pb, method.output_type.name)
        raw: Any = target.channel.unary_unary(
            f"/{SERVICE.full_name}/{method.name}", request_serializer=None, response_deserializer=response.FromString
        )
        for _ in range(GARBAGE_PER_METHOD):
            data = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200)))
            code, _ = call(raw, data)
            codes.setdefault(method.name, set()).add(code.name)
            if code not in (OK, INVALID, grpc.StatusCode.NOT_FOUND):
                worst = code
    summary = ", ".join(f"{name} {'/'.join(sorted(found))}" for name, found in codes.items())
    return Outcome(f"{GARBAGE_PER_METHOD} random byte strings to each method ({summary})", worst, "")


# Each case: its name, the status code a well-behaved service answers, and how to run it. Append the
# authentication cases here (a call without a client certificate, an Unreserve of another's reservation).
CASES: list[Case] = [
    Case("partial-bad-gang", INVALID, partial_bad_gang),
    Case("duplicate-members", INVALID, duplicate_members),
    Case("abandoned-grpc-only-members", OK, abandoned_members),
    Case("max-size-gang", INVALID, max_size_gang),
    Case("min-available-2147483648", INVALID, huge_min_available),
    Case("pod-json-100000-deep", INVALID, deep_pod_json),
    Case("garbage-bytes", INVALID, garbage_bytes),
]


# --- authentication (the mutual TLS service) -----------------------------------------------------------

WRITER, OTHER_WRITER, READER = "kubenexus-scheduler", "other-writer", "reader"
DENIED = grpc.StatusCode.PERMISSION_DENIED


def without_certificate(target: Target) -> Outcome:
    code, _ = call(target.as_client(None).ListNodes, pb.ListNodesRequest())
    return Outcome("ListNodes over TLS without a client certificate", code, "")


def reader_reserves(target: Target) -> Outcome:
    code, _ = call(target.as_client(READER).Reserve, pb.ReserveRequest(pod=pod("read-only")))
    left = _still_reserved(target, "read-only")
    return Outcome(f"Reserve as {READER!r}, a read-only identity", code, left and f"read-only reserved ({left})")


def unreserve_anothers(target: Target) -> Outcome:
    """The squat found in testing: pod A got GPUs, another client released them, pod B got the same ones."""
    owner, other = target.as_client(WRITER), target.as_client(OTHER_WRITER)
    code, answer = call(owner.Reserve, pb.ReserveRequest(pod=pod("owned")))
    if code != OK or not answer.reserved:
        return Outcome(f"Reserve as {WRITER!r}", code if code != OK else grpc.StatusCode.UNKNOWN, "not reserved")
    code, _ = call(other.Unreserve, pb.UnreserveRequest(pod=pb.PodRef(namespace=NAMESPACE, name="owned")))
    left = "" if _still_reserved(target, "owned") else "the reservation was released by the other client"
    return Outcome(f"Unreserve of {WRITER!r}'s reservation as {OTHER_WRITER!r}", code, left)


def _still_reserved(target: Target, name: str) -> str:
    """The node holding ``name``'s reservation ("" when none), released afterwards by its owner."""
    code, answer = call(
        target.as_client(WRITER).Unreserve, pb.UnreserveRequest(pod=pb.PodRef(namespace=NAMESPACE, name=name))
    )
    return "held" if code == OK and answer.released else ""


AUTH_CASES: list[Case] = [
    Case("no-client-certificate", grpc.StatusCode.UNAVAILABLE, without_certificate),
    Case("reader-reserves", DENIED, reader_reserves),
    Case("unreserve-another-clients-reservation", DENIED, unreserve_anothers),
]


def _credentials(folder: Path, name: str | None) -> grpc.ChannelCredentials:
    ca = (folder / "ca.crt").read_bytes()
    if name is None:
        return grpc.ssl_channel_credentials(root_certificates=ca)
    key, cert = (folder / f"{name}.key").read_bytes(), (folder / f"{name}.crt").read_bytes()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def open_address_refused() -> bool:
    """``serve`` on every interface without client certificates exits 2 with one sentence."""
    command = [sys.executable, "-m", "placement.main", "serve", "--listen", "0.0.0.0:0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    refused = done.returncode == 2 and "without client authentication" in done.stderr
    print(f"plaintext-on-an-open-address: serve --listen 0.0.0.0:0 -> exit {done.returncode}"
          f"{'' if refused else '  <-- FAILED (expected exit 2, refused)'}")  # fmt: skip
    return refused


# --- running -------------------------------------------------------------------------------------------


def run_cases(target: Target, cases: list[Case], started: float) -> bool:
    ok = True
    later: list[tuple[str, Callable[[Target], str]]] = []
    for case in cases:
        if time.monotonic() - started > BUDGET_S - DEFAULT_PERMIT_TIMEOUT_S - 5:
            print(f"{case.name}: skipped (time budget)")
            ok = False
            continue
        outcome = case.run(target)
        dirty = "; ".join(part for part in (outcome.clean, service_answers(target)) if part)
        if outcome.later is not None:
            later.append((case.name, outcome.later))
        good = outcome.code == case.expected and not dirty
        ok &= good
        print(
            f"{case.name}: sent {outcome.sent} -> {outcome.code.name} (expected {case.expected.name}); "
            f"state {'clean' if not dirty else 'NOT CLEAN: ' + dirty}{'' if good else '  <-- FAILED'}"
        )
    if later:
        # Members registered now are dropped once the permit timeout passed and the next tick ran.
        time.sleep(max(0.0, DEFAULT_PERMIT_TIMEOUT_S + 2.0 - (time.monotonic() - started)))
        for name, check in later:
            left = check(target)
            ok &= not left
            print(f"{name}: after the permit timeout: {'nothing left' if not left else 'LEFT: ' + left}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", help="a running service on loopback (default: start the demo service)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    ok = open_address_refused()
    process = None
    if args.address is not None:
        address = loopback(args.address)
    else:
        process, address = start_demo()
        loopback(address)
    channel = grpc.insecure_channel(address)
    try:
        target = Target(address, channel)
        ok &= run_cases(target, CASES, time.monotonic())
        health_stub: Any = health_pb2_grpc.HealthStub(channel)  # the stubs omit its methods
        health = health_stub.Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)
        print(f"health: {health_pb2.HealthCheckResponse.ServingStatus.Name(health.status)}")
    finally:
        channel.close()
        if process is not None:
            stop_demo(process)
    if args.address is None:
        ok &= _run_auth_cases()
    print(f"{'every case as expected' if ok else 'SOME CASES FAILED'} in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


def _run_auth_cases() -> bool:
    """``AUTH_CASES`` against a demo service with mutual TLS and two writer identities."""
    with tempfile.TemporaryDirectory(prefix="kubenexus-abuse-") as scratch:
        folder = Path(scratch)
        try:
            make_certificates(folder, (WRITER, OTHER_WRITER, READER))
        except (OSError, subprocess.CalledProcessError) as error:
            print(f"authentication cases: NOT RUN, openssl cannot make certificates ({error})  <-- FAILED")
            return False
        process, address = start_demo(
            "--tls-cert", str(folder / "server.crt"), "--tls-key", str(folder / "server.key"),
            "--tls-client-ca", str(folder / "ca.crt"),
            "--writer-identity", WRITER, "--writer-identity", OTHER_WRITER,
        )  # fmt: skip
        channel = grpc.secure_channel(address, _credentials(folder, WRITER))
        try:
            return run_cases(Target(address, channel, folder), AUTH_CASES, time.monotonic())
        finally:
            channel.close()
            stop_demo(process)
