"""Issue 5 acceptance: ``neardup crawl`` with no configuration runs a whole crawl on the embedded
stack against a local site, writes decisions, and leaves nothing running; Ctrl-C stops all."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from sites.manifest import manifest
from sites.planted import build_site
from sites.server import SiteServer

pytestmark = pytest.mark.integration


@pytest.fixture
def site() -> Iterator[SiteServer]:
    with SiteServer(build_site()) as server:
        yield server


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env["SCRAPY_SETTINGS_MODULE"] = "crawler.settings"
    return env


def _descendants(pid: int) -> set[psutil.Process]:
    try:
        return set(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return set()


def _run(argv: list[str], tmp_path: Path) -> tuple[subprocess.Popen[str], set[psutil.Process]]:
    exe = shutil.which("neardup")
    assert exe, "the neardup console script is installed"
    proc = subprocess.Popen(
        [exe, *argv, "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "d.jsonl")],
        env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    return proc, set()


def _watch(proc: subprocess.Popen[str], seen: set[psutil.Process], until: float) -> None:
    while proc.poll() is None and time.monotonic() < until:
        seen |= _descendants(proc.pid)
        time.sleep(0.2)


def test_crawl_on_the_embedded_default(site: SiteServer, tmp_path: Path) -> None:
    truth = manifest(site)
    domains = "127.0.0.2,127.0.0.3,127.0.0.4"
    proc, seen = _run(
        ["crawl", truth["seeds"]["main"], "--allowed-domains", domains, "--workers", "2"], tmp_path
    )
    _watch(proc, seen, time.monotonic() + 240)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output[-3000:]
    # Every process the run started (broker, redis-server, workers, spider) is gone.
    assert len(seen) >= 4, f"expected broker, redis, workers and spider, saw {len(seen)}"
    _, alive = psutil.wait_procs(list(seen), timeout=5)
    assert not alive, [p.pid for p in alive]
    decisions = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    verdicts = {d["url"]: d["verdict"] for d in decisions}
    assert "near_duplicate" in verdicts.values() and "unique" in verdicts.values()
    planted = {d["url"]: d["original"] for d in truth["duplicates"] if d["url"] in verdicts}
    assert planted, "the crawl reached planted duplicates"
    for url in planted:
        assert verdicts[url] in ("near_duplicate", "exact_duplicate"), url
    assert "neardup crawl finished" in output and "outlinks suppressed" in output


def test_ctrl_c_stops_every_process(site: SiteServer, tmp_path: Path) -> None:
    truth = manifest(site)
    proc, seen = _run(["crawl", truth["seeds"]["main"], "--workers", "2"], tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(seen) < 4 and proc.poll() is None:
        _watch(proc, seen, time.monotonic() + 0.5)
    assert proc.poll() is None, "the crawl should still be running"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    _, alive = psutil.wait_procs(list(seen), timeout=10)
    assert not alive, [(p.pid, p.name()) for p in alive]
