"""Issue 5 acceptance: ``neardup crawl`` with no configuration runs a whole crawl on the embedded
stack against a local site, writes decisions, and leaves nothing running; Ctrl-C stops all.

Every test runs the console script by its absolute path with a ``PATH`` that lacks the
virtualenv (issue 14: an unactivated venv, pipx or a system install must work): the workers and
the spider are started through the running interpreter, never looked up on ``PATH``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dedup_worker.contract.messages import Decision, decode_decision
from dedup_worker.contract.reading import fold_decisions
from neardup.demo.manifest import manifest
from neardup.demo.planted import build_site
from neardup.demo.server import SiteServer
from tests.support.crawl_helpers import read_topic

pytestmark = pytest.mark.integration


@pytest.fixture
def site() -> Iterator[SiteServer]:
    with SiteServer(build_site()) as server:
        yield server


SUPPRESSED = ("near_duplicate", "exact_duplicate")


def _final(path: Path) -> dict[str, Decision]:
    """Each page's standing decision (the contract's rule), by URL (each fetched once)."""
    final = fold_decisions(decode_decision(line) for line in path.read_bytes().splitlines())
    by_url = {key.url: decision for key, decision in final.items()}
    assert len(by_url) == len(final), "a URL was decided as two pages"
    return by_url


#: The ``neardup`` console script of this installation, run by absolute path.
NEARDUP = Path(sys.executable).parent / "neardup"


def _clean_env() -> dict[str, str]:
    """No NEARDUP_* variables, and a PATH without this installation's scripts (nor any
    dedup-worker or scrapy of another one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env["SCRAPY_SETTINGS_MODULE"] = "crawler.settings"
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        d for d in env.get("PATH", "").split(os.pathsep)
        if d and not (Path(d) / "dedup-worker").exists() and not (Path(d) / "scrapy").exists()
    )  # fmt: skip
    assert shutil.which("dedup-worker", path=env["PATH"]) is None
    return env


def _descendants(pid: int) -> set[psutil.Process]:
    try:
        return set(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return set()


def _run(argv: list[str], tmp_path: Path) -> tuple[subprocess.Popen[str], set[psutil.Process]]:
    assert NEARDUP.exists(), "the neardup console script is installed"
    proc = subprocess.Popen(
        [str(NEARDUP), *argv, "--state-dir", str(tmp_path / "state"),
         "--out", str(tmp_path / "d.jsonl")],
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
    final = _final(tmp_path / "d.jsonl")
    verdicts = {url: d.verdict.value for url, d in final.items()}
    assert "near_duplicate" in verdicts.values() and "unique" in verdicts.values()
    pairs = [(d["url"], d["original"]) for d in truth["duplicates"]]
    decided = [(a, b) for a, b in pairs if a in final and b in final]
    assert decided, "the crawl reached planted duplicate pairs"
    for a, b in decided:
        # Whichever of the two was fetched first is kept; the other points to it.
        suppressed = [final[u] for u in (a, b) if verdicts[u] in SUPPRESSED]
        assert len(suppressed) == 1, (a, b, verdicts[a], verdicts[b])
        assert suppressed[0].duplicate_of in (a, b)
    assert "neardup crawl finished" in output and "outlinks suppressed" in output
    # The spider's counts of what it did not fetch, and the URL rules (issue 13).
    assert f"published: {len(final)}" in output
    assert "skipped by URL rule: " in output and "duplicates' outlinks: " in output
    assert "URL rules: " in output


def test_ctrl_c_stops_every_process(site: SiteServer, tmp_path: Path) -> None:
    truth = manifest(site)
    proc, seen = _run(["crawl", truth["seeds"]["main"], "--workers", "2"], tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(seen) < 4 and proc.poll() is None:
        _watch(proc, seen, time.monotonic() + 0.5)
    assert proc.poll() is None, "the crawl should still be running"
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, output[-3000:]
    _, alive = psutil.wait_procs(list(seen), timeout=10)
    assert not alive, [(p.pid, p.name()) for p in alive]
    # The spiders stopped first (the workers still deciding), the recorder before its file
    # closed (it wrote to the closed file: a traceback), and the summary is printed.
    assert "Traceback" not in output, output[-3000:]
    assert "the spiders hand what they owe over" in output
    assert "neardup crawl stopped in" in output and "total" in output


def test_a_killed_spider_is_named_with_what_it_left(site: SiteServer, tmp_path: Path) -> None:
    """A spider killed mid-crawl (SIGKILL, as the kernel kills a process out of memory) hands
    nothing over: the crawl says so, and who takes over what it owed, and exits 137 (it
    exited 247 and said only "ended with code -9")."""
    proc, seen = _run(["crawl", manifest(site)["seeds"]["main"], "--workers", "1"], tmp_path)
    spider = None
    deadline = time.monotonic() + 120
    while spider is None and proc.poll() is None and time.monotonic() < deadline:
        _watch(proc, seen, time.monotonic() + 0.5)
        spider = next((p for p in seen if "scrapy" in " ".join(_cmdline(p))), None)
    assert spider is not None and proc.poll() is None, "the spider should be running"
    spider.kill()
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 137, output[-3000:]
    assert "a spider was killed by SIGKILL" in output, output[-3000:]
    assert "takes it over" in output


def test_a_run_after_a_killed_spider_fetches_what_it_had_claimed(
    site: SiteServer, tmp_path: Path, kafka_broker: object, redis_server: object
) -> None:
    """The requests a spider claimed and had not sent are journaled in Redis; killed, it stops
    beating, and the next run of the crawl id takes them over (after ``PEER_TIMEOUT``) and
    fetches them. Before, that run found every URL claimed and fetched nothing."""
    # Decisions at most every 2 s (the worker's batch interval) pace the crawl, so the kill
    # lands mid-crawl even on a busy machine (unpaced, a fast spider had finished by then).
    env = {
        **_external_env(kafka_broker, redis_server, f"killed-{time.time_ns()}"),
        "NEARDUP_BATCH_INTERVAL_MS": "2000",
    }
    first = subprocess.Popen(
        [str(NEARDUP), "crawl", manifest(site)["seeds"]["main"], "--workers", "1",
         "--state-dir", str(tmp_path / "state1"), "--out", str(tmp_path / "d1.jsonl")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: set[psutil.Process] = set()
    deadline = time.monotonic() + 180
    out = tmp_path / "d1.jsonl"
    while first.poll() is None and time.monotonic() < deadline:
        _watch(first, seen, time.monotonic() + 0.3)
        if out.exists() and out.read_bytes().count(b"\n") >= 10:
            break
    spider = next((p for p in seen if "scrapy" in " ".join(_cmdline(p))), None)
    assert spider is not None and first.poll() is None, "the spider should be running"
    spider.kill()
    assert first.communicate(timeout=120)[0] and first.returncode == 137
    log = (tmp_path / "state1" / "spider.log").read_text()
    assert "Closing spider" not in log, "killed mid-crawl, not as it closed"
    second = subprocess.run(
        [str(NEARDUP), "crawl", manifest(site)["seeds"]["main"], "--workers", "1",
         "--state-dir", str(tmp_path / "state2"), "--out", str(tmp_path / "d2.jsonl")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    stats = json.loads((tmp_path / "state2" / "crawl-stats.json").read_text())
    assert stats.get("dedup/requests_taken_from_killed", 0) > 0, stats
    assert stats["dedup/pages_fetched"] > 0, stats


def _external_env(kafka_broker: object, redis_server: object, run: str) -> dict[str, str]:
    """``neardup crawl``'s environment on the suite's broker and Redis, with a crawl id,
    index namespace and topics of its own."""
    return {
        **_clean_env(),
        "NEARDUP_KAFKA_BOOTSTRAP": kafka_broker.bootstrap,  # type: ignore[attr-defined]
        "NEARDUP_REDIS_URL": redis_server.url,  # type: ignore[attr-defined]
        "NEARDUP_CRAWL_ID": run,
        "NEARDUP_INDEX_NAMESPACE": run,
        "NEARDUP_PAGES_TOPIC": f"{run}-pages",
        "NEARDUP_DECISIONS_TOPIC": f"{run}-decisions",
        "NEARDUP_DLQ_TOPIC": f"{run}-dlq",
    }


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # gone meanwhile
        return []


def test_ctrl_c_mid_crawl_leaves_no_page_undecided(site: SiteServer, tmp_path: Path) -> None:
    """Stopped while pages await their decisions: the workers go on deciding while the
    spider closes (``NEARDUP_STOP_GRACE``, long here for a busy machine; the wait ends when
    every page is decided), so its links are left judged, none undecided by a missing page."""
    env = {**_clean_env(), "NEARDUP_STOP_GRACE": "60"}
    output = _interrupted(site, tmp_path, env, decisions=20)
    assert "Traceback" not in output, output[-3000:]
    stats = json.loads((tmp_path / "state" / "crawl-stats.json").read_text())
    assert stats["finish_reason"] == "shutdown"
    assert stats["dedup/outstanding_at_close"] == 0, stats


def test_ctrl_c_records_every_decision_the_workers_make(
    site: SiteServer, tmp_path: Path, kafka_broker: object, redis_server: object
) -> None:
    """``--out`` holds every decision of the run, those the workers make after the spider
    stopped too: the workers stop before the recorder drains. Here the spider does not wait
    for its last decisions (``NEARDUP_STOP_GRACE=0``) and the worker decides every 2 s at most
    (``NEARDUP_BATCH_INTERVAL_MS``), so the pages the spider published as it stopped are
    decided after it exited."""
    run = f"ctrl-c-out-{time.time_ns()}"
    env = {
        **_external_env(kafka_broker, redis_server, run),
        "NEARDUP_STOP_GRACE": "0",
        "NEARDUP_BATCH_INTERVAL_MS": "2000",
    }
    _interrupted(site, tmp_path, env, decisions=10)
    recorded = [line for line in (tmp_path / "d.jsonl").read_bytes().splitlines() if line]
    on_topic = [r.value for r in read_topic(kafka_broker.bootstrap, f"{run}-decisions")]  # type: ignore[attr-defined]
    assert len(on_topic) > 10
    missing = [v for v in on_topic if v not in set(recorded)]
    assert not missing, f"{len(missing)} of {len(on_topic)} decisions not in --out"
    assert len(recorded) == len(on_topic)


def _interrupted(site: SiteServer, tmp_path: Path, env: dict[str, str], decisions: int) -> str:
    """``neardup crawl`` (one worker, ``--out tmp_path/d.jsonl``) sent SIGINT once it has
    recorded ``decisions`` decisions; its output, after asserting it exited 130."""
    out = tmp_path / "d.jsonl"
    proc = subprocess.Popen(
        [str(NEARDUP), "crawl", manifest(site)["seeds"]["main"], "--workers", "1",
         "--state-dir", str(tmp_path / "state"), "--out", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") >= decisions:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the crawl should still be running"
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output[-3000:]
    return output


def test_crawl_uses_the_services_named_by_the_environment(
    site: SiteServer, tmp_path: Path, kafka_broker: object, redis_server: object
) -> None:
    truth = manifest(site)
    env = _clean_env()
    env["NEARDUP_KAFKA_BOOTSTRAP"] = kafka_broker.bootstrap  # type: ignore[attr-defined]
    env["NEARDUP_REDIS_URL"] = redis_server.url  # type: ignore[attr-defined]
    env["NEARDUP_CRAWL_ID"] = f"external-{time.time_ns()}"
    proc = subprocess.Popen(
        [str(NEARDUP), "crawl", truth["seeds"]["main"], "--workers", "1", "--max-pages", "5",
         "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "d.jsonl")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: set[psutil.Process] = set()
    _watch(proc, seen, time.monotonic() + 180)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output[-3000:]
    names = {p.name() for p in seen if p.is_running()} | {
        " ".join(p.cmdline()) for p in seen if p.is_running()
    }
    started = " ".join(sorted(names))
    assert "tansu" not in started and "redis-server" not in started, started
    assert not (tmp_path / "state" / "stack").exists(), "no embedded stack when services are set"
    assert (tmp_path / "d.jsonl").read_text().strip(), "decisions were recorded"


def test_only_one_service_variable_is_a_clear_error(tmp_path: Path) -> None:
    env = _clean_env()
    env["NEARDUP_KAFKA_BOOTSTRAP"] = "127.0.0.1:1"
    out = subprocess.run(
        [str(NEARDUP), "crawl", "http://127.0.0.2/", "--state-dir", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 1
    assert "set both NEARDUP_KAFKA_BOOTSTRAP and NEARDUP_REDIS_URL" in out.stderr
