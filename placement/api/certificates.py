"""The service's TLS files read again when they change, so that a renewed certificate is served before the
old one expires.

cert-manager renews a certificate at two thirds of its life and rewrites its Secret; the kubelet then swaps
the mounted files (a symlink to a new directory) within a minute or so. gRPC asks ``ServerCertificates.fetch``
at each new connection's handshake, which reads the files again once they changed
(``kubenexus.reloaded_files``) and, once the key is checked to match the certificate, serves them from then
on. Connections already open keep the certificate they were made with, so no call is dropped.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Protocol

import grpc

from kubenexus.reloaded_files import Reloaded

log = logging.getLogger("kubenexus.placement.certificates")


class TlsFilePaths(Protocol):
    @property
    def cert(self) -> Path: ...
    @property
    def key(self) -> Path: ...
    @property
    def client_ca(self) -> Path | None: ...


class ServerCertificates:
    def __init__(self, tls: TlsFilePaths) -> None:
        self._tls = tls
        paths = [path for path in (tls.cert, tls.key, tls.client_ca) if path is not None]
        # Raises ValueError naming the files when they cannot be read at start.
        self.files = Reloaded(paths, self._configuration, what="TLS files", log=log)

    @property
    def client_authentication(self) -> bool:
        return self._tls.client_ca is not None

    def credentials(self) -> grpc.ServerCredentials:
        # The fetcher returns None to keep the configuration (grpc.dynamic_ssl_server_credentials' docs);
        # the stubs type it without None.
        return grpc.dynamic_ssl_server_credentials(
            self.files.value,
            self.fetch,  # type: ignore[arg-type]
            require_client_authentication=self.client_authentication,
        )

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """None while the files are unchanged (gRPC keeps what it serves); the new configuration once."""
        return self.files.value if self.files.refresh() else None

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        tls = self._tls
        try:
            key, cert = tls.key.read_bytes(), tls.cert.read_bytes()
            ca = tls.client_ca.read_bytes() if tls.client_ca is not None else None
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls.cert, tls.key)
        except OSError as error:  # ssl.SSLError among them
            raise ValueError(f"cannot load the TLS files {tls.cert} and {tls.key}: {error}") from None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)
