"""A metrics port that cannot be served, said the way users fix it (probe and monitor alike).

prometheus_client's ``start_http_server`` raises a bare ``OSError`` deep in a traceback; both
components turn it, or this module's check before a slow start (Spark), into one line naming
the setting: ``metrics.port 9465 is in use on 0.0.0.0 ...``.
"""

from __future__ import annotations

import errno
import socket


def problem(port: int, addr: str, err: OSError) -> str:
    """The message for ``err``, raised when listening on ``addr``:``port``."""
    if err.errno == errno.EADDRINUSE:
        return (f"metrics.port {port} is in use on {addr}: stop what listens there, or pick "
                "another port (--metrics-port, or 0 for no endpoint)")
    return f"metrics.port {port}: cannot listen on {addr}: {err.strerror or err}"


def bind_problem(port: int, addr: str) -> str | None:
    """Why a metrics server could not listen on ``addr``:``port`` now; None if it could."""
    if not port:
        return None
    try:
        family = socket.getaddrinfo(addr or None, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            # As the server binds (http.server sets SO_REUSEADDR): TIME_WAIT is no conflict.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((addr, port))
    except OSError as err:
        return problem(port, addr, err)
    return None
