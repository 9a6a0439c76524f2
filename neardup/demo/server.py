"""Serve a site on loopback addresses, one threaded server per host: the planted demo site
(:class:`~neardup.demo.planted.Site`) or a folder of real pages (:mod:`neardup.demo.static`).

Linux routes all of 127.0.0.0/8 to the loopback interface, so each host of the site gets an
address of its own (127.0.0.2, 127.0.0.3, ...), as different hosts on the web would: Scrapy's
per-host concurrency slots, robots.txt and allowed domains all see distinct hosts. Every request
is recorded in :attr:`SiteServer.log` (host, path, status), the ground truth of what a crawl
fetched.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

from crawler.urls import canonicalize_url
from neardup.errors import NeardupError

ADDRESSES = {
    "main": "127.0.0.2",
    "mirror": "127.0.0.3",
    "other": "127.0.0.4",
    "docs": "127.0.0.5",  # neardup.demo.subtrees
    "pubmirror": "127.0.0.6",
}


class SiteAddressError(NeardupError):
    """A loopback address of the site cannot be bound; the message says which and what to do."""


@dataclass(frozen=True)
class Hit:
    host: str
    path: str
    status: int
    peer: str = ""  # the client's address and port: which connection asked
    user_agent: str = ""


#: A response: status, headers, body.
Response = tuple[int, dict[str, str], bytes]


class Content(Protocol):
    """What a served site provides: its hosts, and a response to a request for a path."""

    @property
    def hosts(self) -> tuple[str, ...]: ...

    def respond(self, host: str, path: str, base: dict[str, str]) -> Response:
        """The response to ``GET path`` on ``host``; ``base`` maps every host to its served
        ``http://address:port`` (for absolute links and redirects)."""
        ...


C = TypeVar("C", bound=Content)


class SiteServer(Generic[C]):
    def __init__(self, site: C, addresses: dict[str, str] | None = None) -> None:
        self.site = site
        self.addresses = addresses or ADDRESSES
        self.base: dict[str, str] = {}
        self.log: list[Hit] = []
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []

    def start(self) -> Self:
        """Serve every host on its address (a free port each); ``SiteAddressError`` naming the
        address when one cannot be bound (nothing is left serving then)."""
        try:
            for host in self.site.hosts:
                server = _bind(host, self.addresses, _handler(self, host))
                server.daemon_threads = True
                self._servers.append(server)
                self.base[host] = f"http://{self.addresses[host]}:{server.server_address[1]}"
                name = f"site-{host}"
                threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def url(self, host: str, path: str) -> str:
        return canonicalize_url(self.base[host] + path)

    def record(self, hit: Hit) -> None:
        with self._lock:
            self.log.append(hit)

    def fetched(self) -> list[str]:
        """Canonical URLs of every page request served (robots.txt excluded), with repeats."""
        with self._lock:
            hits = list(self.log)
        return [self.url(h.host, h.path) for h in hits if h.path != "/robots.txt"]

    def respond(self, host: str, path: str) -> Response:
        return self.site.respond(host, path, self.base)


def _bind(host: str, addresses: dict[str, str], handler: Any) -> ThreadingHTTPServer:
    address = addresses[host]
    try:
        return ThreadingHTTPServer((address, 0), handler)
    except OSError as exc:
        raise SiteAddressError(
            f"cannot serve the site's host {host!r} on {address}: {exc.strerror or exc}. Each "
            f"host gets a loopback address of its own ({', '.join(sorted(set(addresses.values())))}"
            "): Linux routes all of 127.0.0.0/8 to the loopback interface, other systems only "
            f"127.0.0.1 unless told (macOS: sudo ifconfig lo0 alias {address} up, once per "
            "address)"
        ) from exc


def _handler(server: SiteServer[Any], host: str) -> Any:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            status, headers, body = server.respond(host, self.path)
            host_port = self.client_address[:2]
            peer = f"{host_port[0]}:{host_port[1]}"
            agent = self.headers.get("User-Agent", "")
            server.record(Hit(host, self.path, status, peer, agent))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the access log is `server.log`

    return Handler
