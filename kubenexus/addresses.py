"""Listen addresses, parsed one way for every server of both programs."""

from __future__ import annotations

import ipaddress


def parse_address(address: str) -> tuple[str, int]:
    """``:9400`` (every interface), ``127.0.0.1:9400``, ``[::1]:9400``; port 0 picks a free one."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address {address!r} is not HOST:PORT or :PORT")
    return host.strip("[]"), int(port)


def is_loopback(listen: str) -> bool:
    """A gRPC listen address (``host:port``, ``[v6]:port``, ``unix:path``) only this machine can reach."""
    if listen.startswith(("unix:", "unix-abstract:")):
        return True
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "" is every interface; a host name other than localhost may resolve anywhere
