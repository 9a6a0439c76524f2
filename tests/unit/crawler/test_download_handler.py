"""The download handler's connection pool on real loopback HTTP: a download the spider stops
after its headers must not leave its closing connection to the next request of the host.

The reactor runs in a child process (a Twisted reactor runs once per process)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import REPO

SCENARIO = r"""
import asyncio, json, socket, threading, sys
from collections import Counter
from twisted.internet import asyncioreactor
asyncioreactor.install()
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from scrapy import Request, Spider, signals
from scrapy.exceptions import StopDownload
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from crawler.download_handler import CancellableDownloadHandler

HTML = b"<html><body><p>page</p></body></html>"
PDF = b"%PDF-1.4\n" + b"0" * 4000
hits = Counter()

def serve(conn):
    with conn, conn.makefile("rb") as rfile:
        while True:
            line = rfile.readline()
            if not line:
                return
            path = line.split()[1].decode()
            while rfile.readline() not in (b"\r\n", b""):
                pass
            hits[path] += 1
            pdf = path.endswith(".pdf")
            kind, body = (b"application/pdf", PDF) if pdf else (b"text/html", HTML)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\n" % kind
            head += b"Content-Length: %d\r\n\r\n" % len(body)
            try:
                conn.sendall(head + body)  # one write: the body comes in the headers' read
            except OSError:
                return

listener = socket.create_server(("127.0.0.1", 0))
port = listener.getsockname()[1]
def accept():
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()

crawler = get_crawler(Spider)
handler = build_from_crawler(CancellableDownloadHandler, crawler)
base = f"http://127.0.0.1:{port}"
follow = []

def stop_non_html(headers, body_length, request, spider):
    if b"html" not in headers.get(b"Content-Type", b""):
        # The host's next request starts as a task now (its first step: the next reactor
        # pass), as when a download slot's delay timer fires in the pass that read this.
        page = Request(base + "/page")
        follow.append(asyncio.get_event_loop().create_task(handler.download_request(page)))
        raise StopDownload(fail=False)  # what the neardup spider does with non-HTML

crawler.signals.connect(stop_non_html, signal=signals.headers_received)

async def scenario():
    await handler.download_request(Request(base + "/report.pdf"))
    while not follow:
        await asyncio.sleep(0.01)
    response = await follow[0]
    await asyncio.sleep(0.2)
    return response.status

def done(result):
    print(json.dumps({"result": str(result), "hits": hits}))
    reactor.stop()

reactor.callWhenRunning(
    lambda: Deferred.fromFuture(asyncio.ensure_future(scenario())).addBoth(done)
)
reactor.run()
"""


def test_a_request_after_a_stopped_download_goes_out_once() -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCENARIO],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["result"] == "200", run.stderr
    # Served once: not first on the stopped download's closing connection, then again on a
    # new one by the pool's automatic retry.
    assert outcome["hits"] == {"/report.pdf": 1, "/page": 1}, run.stderr
