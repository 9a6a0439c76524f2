"""A TCP relay on loopback that loses a reply on demand: the network fault between a client and
a real server (the server runs the command; the connection drops before its reply arrives).

Not a stand-in for the server: every byte goes to and comes from the real one.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from neardup.servers.process import free_port


class CuttingProxy:
    """Relays ``127.0.0.1:port`` to ``127.0.0.1:target_port``.

    ``cut_next_reply()``: the next bytes the server sends on any connection are dropped and that
    connection is closed (the server ran whatever they answer). ``refusing``: new connections
    are closed at once (the server out of reach); ``drop_connections()`` closes the others."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port("127.0.0.1")
        self.target_port = target_port
        self.refusing = False
        self.cut_replies = 0
        #: Called once, after the next cut and before the connection closes: what another
        #: client does between a call and its resend.
        self.before_resend: Callable[[], object] | None = None
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> CuttingProxy:
        self._thread.start()
        return self

    def cut_next_reply(self) -> None:
        self._cut.set()

    def drop_connections(self) -> None:
        """Close every relayed connection (what a client sends on one never reaches the
        server)."""
        with self._lock:
            for sock in self._sockets:
                _close(sock)
            self._sockets.clear()

    def stop(self) -> None:
        _close(self._listener)  # the shutdown wakes the accept (a close alone does not)
        with self._lock:
            for sock in self._sockets:
                _close(sock)
        self._thread.join(10)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refusing:
                _close(client)
                continue
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets += [client, server]
            for source, sink, replies in ((client, server, False), (server, client, True)):
                args = (source, sink, replies)
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if replies and self._cut.is_set():
                    self._cut.clear()
                    self.cut_replies += 1
                    hook, self.before_resend = self.before_resend, None
                    if hook is not None:  # runs before the client hears of the cut
                        hook()
                    break
                sink.sendall(data)
        except OSError:
            pass
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
