"""The extender's HTTPS files (certificate, key, the client CA) read again when they change, as the service's
gRPC port reads its own (``placement.api.certificates``): each new connection asks ``context()``, which
loads the files again once they changed (``kubenexus.reloaded_files``). Connections already open keep theirs.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from kubenexus.reloaded_files import Reloaded

log = logging.getLogger("kubenexus.placement.extender")


class ServerTls:
    def __init__(self, cert: Path, key: Path, client_ca: Path | None) -> None:
        self._cert, self._key, self._client_ca = cert, key, client_ca
        paths = [path for path in (cert, key, client_ca) if path is not None]
        # Raises ssl.SSLError or OSError at start.
        self.files = Reloaded(paths, self._load, what="TLS files", log=log)

    @property
    def requires_client_certificates(self) -> bool:
        return self._client_ca is not None

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: the files' current one."""
        self.files.refresh()
        return self.files.value

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self._cert, self._key)
        if self._client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED  # kube-scheduler presents its tlsConfig client certificate
            context.load_verify_locations(cafile=self._client_ca)
        return context
