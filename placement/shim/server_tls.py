"""The extender's HTTPS files (certificate, key, the client CA) read again when they change, as the service's
gRPC port reads its own (``placement.api.certificates``): each new connection asks ``context()``, which
loads the files again once their modification times or sizes changed, and keeps the previous context, with a
warning, while the new set does not load (half written, a key that is not the certificate's). Connections
already open keep theirs.
"""

from __future__ import annotations

import logging
import ssl
import threading
from pathlib import Path

from kubenexus.file_stamps import stamps

log = logging.getLogger("kubenexus.placement.extender")
_NOT_LOADED = "TLS files changed but do not load; serving the previous ones"
_RELOADED = "TLS files changed; new connections get the new certificate"


class ServerTls:
    def __init__(self, cert: Path, key: Path, client_ca: Path | None) -> None:
        self._cert, self._key, self._client_ca = cert, key, client_ca
        self._paths = tuple(path for path in (cert, key, client_ca) if path is not None)
        self._lock = threading.Lock()  # connections are handled on threads of their own
        self._stamp = stamps(self._paths)
        self._context = self._load()  # raises ssl.SSLError or OSError at start
        self.reloads = 0

    @property
    def requires_client_certificates(self) -> bool:
        return self._client_ca is not None

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: the files' current one."""
        with self._lock:
            stamp = stamps(self._paths)
            if stamp != self._stamp:
                try:
                    self._context = self._load()
                except (ssl.SSLError, OSError) as error:
                    log.warning(_NOT_LOADED, extra={"error": str(error)})
                else:
                    self._stamp = stamp
                    self.reloads += 1
                    log.info(_RELOADED, extra={"cert": str(self._cert)})
            return self._context

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self._cert, self._key)
        if self._client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED  # kube-scheduler presents its tlsConfig client certificate
            context.load_verify_locations(cafile=self._client_ca)
        return context
