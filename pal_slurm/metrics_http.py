"""The HTTP endpoint the agent and the placer serve their metrics on, bounded.

Why not `http.server`'s or prometheus_client's server as they come: both run a thread per
connection with no timeout, inside root processes on every node and on the controller, so any
user's job that opens a few hundred idle connections makes as many threads (measured: 300 idle
sockets, 300 threads), pushes the agent past its memory limit and takes the placer's tasks, so
that its scontrol forks fail. Here a connection that sends nothing for `TIMEOUT_S` is closed,
at most `MAX_CONNECTIONS` are served at once (one more is closed at once, unanswered), and the
default address is the loopback one: a site's scrape network is named in the configuration.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_ADDRESS", "MAX_CONNECTIONS", "TIMEOUT_S", "BoundedHTTPServer", "metrics_server"]

#: where the endpoints listen unless the configuration names the scrape network's address
DEFAULT_ADDRESS = "127.0.0.1"
#: connections served at once; a scrape takes one, briefly
MAX_CONNECTIONS = 8
#: seconds a connection may stay silent before it is closed
TIMEOUT_S = 5.0

#: what a scrape gets: (body, HTTP status, content type)
Render = Callable[[], tuple[bytes, int, str]]


class BoundedHTTPServer(ThreadingHTTPServer):
    """A threading server that serves at most `max_connections` at once and closes the rest."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 max_connections: int = MAX_CONNECTIONS) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def metrics_server(address: str, port: int, render: Render, *, name: str,
                   max_connections: int = MAX_CONNECTIONS, timeout_s: float = TIMEOUT_S) -> BoundedHTTPServer:
    """A server answering GET /metrics with `render()` (and / with a pointer to it); not started
    (`serve_forever` in a thread of the caller's). OSError when the port cannot be bound."""

    class Handler(BaseHTTPRequestHandler):
        server_version = name
        timeout = timeout_s  # StreamRequestHandler: a silent connection is closed after it

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    body, status, ctype = render()
                except Exception as exc:  # noqa: BLE001 - a scrape must never take the daemon down
                    log.exception("rendering metrics failed")
                    body, status, ctype = f"metrics unavailable: {type(exc).__name__}\n".encode(), 500, "text/plain"
            elif path == "/":
                body, status, ctype = f"{name}: metrics at /metrics\n".encode(), 200, "text/plain"
            else:
                body, status, ctype = b"not found\n", 404, "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            log.debug("metrics: " + format, *args)

    return BoundedHTTPServer((address, port), Handler, max_connections=max_connections)
