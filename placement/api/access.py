"""Who may call what: the caller's identity from its client certificate, and the per-method rules.

* Development (a loopback address, or ``--insecure``): no client certificate is asked for, and every
  caller may call every method. This is the demo's and a developer's laptop, never a cluster.
* Mutual TLS (``--tls-client-ca``): the identity is the Subject CN of the certificate the client
  presented (gRPC verified it against the CA). Any authenticated client may call the read-only
  methods; ``Reserve``, ``Unreserve``, ``PlaceGang`` and ``Preempt`` (which holds nodes for the
  preemptor) need an identity of ``writers`` (the scheduler shim's). ``Unreserve`` releases only the
  caller's own reservations, unless the caller is one of ``admins`` (the engine checks the owner;
  ``PlacementServicer`` says whether the caller may override).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import grpc

from placement.service.errors import PermissionDenied, Unauthenticated

READ_ONLY_METHODS = frozenset(
    {"Filter", "Score", "CheckEviction", "Explain", "GetNodeTopology", "ListNodes", "PermitStatus"}
)
WRITE_METHODS = frozenset({"Reserve", "Unreserve", "PlaceGang", "Preempt"})
DEFAULT_WRITER = "kubenexus-scheduler"
_COMMON_NAME = "x509_common_name"
_SUBJECT = "x509_subject"


@dataclass(frozen=True)
class AccessPolicy:
    authenticate: bool  # False: development mode, every caller may call everything
    writers: frozenset[str] = frozenset({DEFAULT_WRITER})
    admins: frozenset[str] = frozenset()

    def check(self, method: str, caller: str) -> None:
        """Raise ``Unauthenticated`` or ``PermissionDenied`` unless ``caller`` may call ``method``."""
        if not self.authenticate:
            return
        if not caller:
            raise Unauthenticated("a client certificate is required")
        if method in WRITE_METHODS and caller not in self.writers and caller not in self.admins:
            raise PermissionDenied(f"client {caller!r} may not call {method}: it is not a configured writer identity")
        if method not in WRITE_METHODS and method not in READ_ONLY_METHODS:
            raise PermissionDenied(f"unknown method {method}")

    def may_override(self, caller: str) -> bool:
        """May ``caller`` release a reservation another identity made."""
        return not self.authenticate or caller in self.admins


def caller_of(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The Subject CN of the client certificate gRPC verified; "" without a certificate.

    A certificate naming several CNs, or none, is refused (``Unauthenticated``): gRPC's own
    ``x509_common_name`` is the first of them, so a certificate for a reader and a writer at once would
    otherwise be the one its first CN says, silently. The whole subject (``x509_subject``, RFC 2253) tells."""
    auth = context.auth_context()
    subjects = list(auth.get(_SUBJECT) or ())
    if not subjects:
        first = list(auth.get(_COMMON_NAME) or ())
        return first[0].decode("utf-8", "replace") if first else ""
    names = common_names(subjects[0].decode("utf-8", "replace"))
    if len(names) > 1:
        listed = ", ".join(repr(name) for name in names)
        raise Unauthenticated(f"the client certificate names several identities (Subject CN): {listed}")
    if not names:
        raise Unauthenticated("the client certificate names no identity (Subject CN)")
    return names[0]


def common_names(subject: str) -> list[str]:
    """The CN values of an RFC 2253 subject (``CN=b,O=x,CN=a``), in the certificate's order (RFC 2253
    writes it last attribute first)."""
    attributes = re.split(r"(?<!\\)[,+]", subject)
    names = [attribute.strip()[3:].replace("\\", "") for attribute in attributes if attribute.strip().startswith("CN=")]
    return names[::-1]
