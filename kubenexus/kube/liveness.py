"""Whether the API server has answered lately: a watch cannot tell a quiet collection from a hung server.

A kube-apiserver that stops answering (a stopped process, a wedged etcd, a partition that drops packets
without resetting connections) keeps its watch connections open and sends nothing; a watch notices only
when its read timeout passes (minutes: the server's ``timeoutSeconds`` plus a margin), and until then a
cache built from it looks current while it may miss any change. ``ApiLiveness`` asks ``/readyz`` every
``interval_s`` (each ask bounded by ``timeout_s``): ``answering`` is False once no ask has succeeded for
``silence_s``, and True again at the first answer. ``/readyz`` is readable by every authenticated identity
(the bootstrap ClusterRole ``system:public-info-viewer``), so no RBAC rule is needed.

Nothing is missed while the server is silent: when it answers again its watches go on from where they were,
and a watch that broke meanwhile resumes or relists as ``Reflector`` does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from kubenexus.kube.errors import API_ERRORS, describe

log = logging.getLogger("kubenexus.kube.liveness")

INTERVAL_S = 2.0
TIMEOUT_S = 5.0
# Silence longer than this and the cache may be stale. Long enough that one slow answer from a loaded API
# server is not an outage (two asks fail first); short next to a watch's read timeout (minutes).
SILENCE_S = 10.0


class Probe(Protocol):
    def ready(self, timeout_s: float) -> None: ...  # raises one of API_ERRORS unless the server answered ok


class ApiLiveness:
    """``run`` on its own thread until ``stop``; read ``answering``."""

    def __init__(
        self,
        api: Probe,
        *,
        stop: threading.Event,
        interval_s: float = INTERVAL_S,
        timeout_s: float = TIMEOUT_S,
        silence_s: float = SILENCE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._stop = stop
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self.silence_s = silence_s
        self._clock = clock
        self._answered_at = clock()  # from the start: the initial lists prove the server answers
        self._silent_logged = False

    @property
    def answering(self) -> bool:
        return self._clock() - self._answered_at <= self.silence_s

    @property
    def silent_for_s(self) -> float:
        """Seconds since the server last answered."""
        return max(0.0, self._clock() - self._answered_at)

    def ask(self) -> None:
        """One ask: a success marks the server answering; a failure logs once when the silence begins to count."""
        try:
            self._api.ready(self._timeout_s)
        except API_ERRORS as error:
            if not self.answering and not self._silent_logged:
                self._silent_logged = True
                log.warning(
                    "the API server has not answered; the cache may be stale",
                    extra={"silent_s": round(self.silent_for_s, 1), "error": describe(error)},
                )
            return
        if self._silent_logged:
            self._silent_logged = False
            log.info("the API server answers again", extra={"silent_s": round(self.silent_for_s, 1)})
        self._answered_at = self._clock()

    def run(self) -> None:
        while not self._stop.is_set():
            self.ask()
            self._stop.wait(self._interval_s)
