"""Leader election through a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection`` does it.

Every replica runs an ``LeaderElector``. The one holding the Lease decides (reserves, binds); the others
answer read-only calls and name the leader to callers that asked for a decision.

* **Acquire**: the Lease is free when it does not exist, names no holder, or has not been renewed for
  ``lease_duration_s`` *as observed locally*: a replica records when it last saw the Lease change and
  counts from that moment on its own monotonic clock, so clock skew between machines cannot make two
  replicas believe the Lease expired at different times (client-go's rule).
* **Renew** every ``retry_period_s``. Writes are merge patches carrying the ``resourceVersion`` last
  read: the API server refuses the write (409) when another replica changed the Lease in between, so two
  replicas can never both believe their write won.
* **Lose**: a leader that could not renew for ``renew_deadline_s`` stops leading at once, before the
  Lease can expire for the others (``renew_deadline_s < lease_duration_s`` is enforced), so two leaders
  never decide at the same time. ``is_leader()`` applies the same deadline on every call, so a renewal
  stuck in a hung request cannot keep a stale leader deciding.
* **Release** on a clean stop: the Lease is handed back (holder cleared) so that a rolling update fails
  over in one retry period instead of one lease duration.

Optionally the leader labels its own Pod (``PodLabel``: ``key=true``, removed when it stops leading), so a
Service selecting that label sends decision traffic to the leader only.

Not the client library's ``kubernetes.leaderelection``: its ``run`` blocks until leadership is lost and
then returns for good (no campaigning again), it reaches the API through the generated
``CoordinationV1Api`` on the library's global configuration (not this layer's client and its memory
reason), judges expiry on the wall clock, cannot release the Lease on a clean stop, and offers no
``is_leader`` that applies the renew deadline at the moment a decision asks.
"""

from __future__ import annotations

import argparse
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import API_ERRORS, ApiError, describe

log = logging.getLogger("kubenexus.kube.leader")


@dataclass(frozen=True)
class PodLabel:
    """The label the leader sets to ``true`` on its own Pod, for a Service that routes to the leader."""

    namespace: str
    name: str
    key: str


@dataclass(frozen=True)
class LeaseConfig:
    """client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period."""

    namespace: str
    name: str
    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs an identity (the pod name: set POD_NAME or --identity)")
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} s, {self.renew_deadline_s} s, {self.lease_duration_s} s"
            )

    @classmethod
    def from_flags(cls, args: argparse.Namespace) -> LeaseConfig:
        """From ``lease_flags.add_lease_arguments``' flags; ValueError names a bad combination."""
        return cls(
            namespace=args.lease_namespace,
            name=args.lease_name,
            identity=args.identity,
            lease_duration_s=args.lease_duration,
            renew_deadline_s=args.renew_deadline,
            retry_period_s=args.retry_period,
        )

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"


class LeaderElector:
    """Runs the election on its own thread (``start`` / ``stop``); ``is_leader`` and ``leader_identity``
    are safe to call from any thread (the gRPC servicer consults them on every decision)."""

    def __init__(
        self,
        api: KubeClient,
        config: LeaseConfig,
        *,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        label_pod: PodLabel | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._api = api
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._label_pod = label_pod
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._leading = False
        self._renewed_at = -float("inf")
        self._holder = ""
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) as last read
        self._observed_at = -float("inf")
        self._version = ""

    # --- what callers consult -------------------------------------------------------------------------

    def is_leader(self) -> bool:
        with self._lock:
            return self._leading and self._clock() - self._renewed_at < self.config.renew_deadline_s

    def leader_identity(self) -> str:
        """The identity holding the Lease as last observed; "" when nobody does (or not read yet)."""
        with self._lock:
            return self.config.identity if self._leading else self._holder

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._label_pod is not None:
            self._set_pod_label(leading=False)  # a restart of a former leader: not the leader (yet)
        self._thread = threading.Thread(target=self._run, name="leader election", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True, timeout_s: float = 5.0) -> None:
        """Stop campaigning; a leader steps down (callbacks run) and, with ``release``, frees the Lease.

        ``release=False`` is what a crash looks like to the others: they wait for the Lease to expire.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self.is_leader() or self._leading:
            if release:
                self._release()
            self._step_down()

    def _run(self) -> None:
        while not self._stop.is_set():
            acquired = self._try_acquire_or_renew()
            now = self._clock()
            with self._lock:
                if acquired:
                    self._renewed_at = now
                starting = acquired and not self._leading
                lost = self._leading and not acquired and now - self._renewed_at >= self.config.renew_deadline_s
            if starting:
                self._start_leading()
            elif lost:
                log.warning("lost the leader lease; stepping down", extra={"lease": self.config.name})
                self._step_down()
            self._stop.wait(self.config.retry_period_s)

    def _start_leading(self) -> None:
        with self._lock:
            self._leading = True
        log.info("became the leader", extra={"lease": self.config.name, "identity": self.config.identity})
        if self._label_pod is not None:
            self._set_pod_label(leading=True)
        if self._on_started is not None:
            self._on_started()

    def _step_down(self) -> None:
        with self._lock:
            was_leading, self._leading = self._leading, False
        if not was_leading:
            return
        if self._on_stopped is not None:
            self._on_stopped()
        if self._label_pod is not None:
            self._set_pod_label(leading=False)

    # --- the Lease ------------------------------------------------------------------------------------

    def _try_acquire_or_renew(self) -> bool:
        config = self.config
        try:
            lease = self._api.get(config.path)
            now = self._clock()
            if lease is None:
                self._api.create(config.path.rsplit("/", 1)[0], self._lease_body(transitions=0, acquired=True))
                self._observe(config.identity, "", now)
                return True
            spec = lease.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            self._version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
            self._observe(holder, str(spec.get("renewTime") or ""), now)
            duration = float(spec.get("leaseDurationSeconds") or config.lease_duration_s)
            if holder and holder != config.identity and now - self._observed_at < duration:
                return False  # held by a live leader
            changed_hands = holder != config.identity
            transitions = int(spec.get("leaseTransitions") or 0) + (1 if changed_hands else 0)
            body = self._lease_body(transitions=transitions, acquired=changed_hands)
            if self._version:
                body["metadata"]["resourceVersion"] = self._version  # the 409 precondition
            self._api.merge_patch(config.path, body)
            if changed_hands:
                log.info("acquired the leader lease", extra={"lease": config.name, "previous": holder or None})
            return True
        except ApiError as error:
            if error.status == 409:
                return False  # another replica wrote first: it leads
            log.warning("leader lease call failed", extra={"lease": config.name, "error": describe(error)})
            return False
        except API_ERRORS as error:
            log.warning("leader lease call failed", extra={"lease": config.name, "error": describe(error)})
            return False

    def _observe(self, holder: str, renew_time: str, now: float) -> None:
        with self._lock:
            if (holder, renew_time) != self._observed:
                self._observed = (holder, renew_time)
                self._observed_at = now
            self._holder = holder

    def _lease_body(self, *, transitions: int, acquired: bool) -> Json:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec: Json = {
            "holderIdentity": self.config.identity,
            # Whole seconds, rounded up: the API server refuses 0, and rounding down would let the others take
            # the Lease before this leader's renew deadline has passed (two leaders at once).
            "leaseDurationSeconds": math.ceil(self.config.lease_duration_s),
            "renewTime": stamp,
            "leaseTransitions": transitions,
        }
        if acquired:
            spec["acquireTime"] = stamp
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": spec,
        }

    def _release(self) -> None:
        try:
            lease = self._api.get(self.config.path)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.config.identity:
                return
            version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
            patch: Json = {"spec": {"holderIdentity": None, "leaseDurationSeconds": 1}}
            if version:
                patch["metadata"] = {"resourceVersion": version}
            self._api.merge_patch(self.config.path, patch)
            log.info("released the leader lease", extra={"lease": self.config.name})
        except API_ERRORS as error:
            log.warning("could not release the leader lease", extra={"error": describe(error)})

    def _set_pod_label(self, *, leading: bool) -> None:
        assert self._label_pod is not None
        pod = self._label_pod
        patch = {"metadata": {"labels": {pod.key: "true" if leading else None}}}
        try:
            self._api.merge_patch(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", patch)
        except API_ERRORS as error:
            # Routing only: the servicer still refuses decisions on a follower, so this is not unsafe.
            log.warning(
                "could not label this pod for leader routing", extra={"pod": pod.name, "error": describe(error)}
            )
