"""Throwaway certificates for trying mutual TLS on loopback: a CA, a server certificate for 127.0.0.1 and
localhost, and a client certificate per name (its Subject CN is the name, the service's client identity).
Made with the ``openssl`` command, as docs/deploy.md's manual route makes the real ones."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path


def make_certificates(folder: Path, clients: Iterable[str]) -> None:
    """``ca.crt``, ``server.crt``/``.key`` and ``<client>.crt``/``.key`` in ``folder``, valid for a day.

    Raises ``OSError`` without ``openssl`` and ``CalledProcessError`` when it fails.
    """

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=throwaway-ca",
            "-keyout", str(folder / "ca.key"), "-out", str(folder / "ca.crt"))  # fmt: skip
    leaves = [("server", "subjectAltName=IP:127.0.0.1,DNS:localhost")]
    leaves += [(name, "extendedKeyUsage=clientAuth") for name in clients]
    for name, extension in leaves:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", str(folder / f"{name}.key"), "-out", str(folder / f"{name}.csr"))  # fmt: skip
        (folder / f"{name}.ext").write_text(extension + "\n")
        openssl("x509", "-req", "-in", str(folder / f"{name}.csr"), "-CA", str(folder / "ca.crt"),
                "-CAkey", str(folder / "ca.key"), "-CAcreateserial", "-days", "1",
                "-extfile", str(folder / f"{name}.ext"), "-out", str(folder / f"{name}.crt"))  # fmt: skip
