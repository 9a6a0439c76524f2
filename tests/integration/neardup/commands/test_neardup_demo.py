"""Issue 14: ``neardup demo`` runs anywhere, offline: the console script by its absolute path,
with a ``PATH`` that lacks the virtualenv, ``NEARDUP_*`` variables naming unreachable services
(ignored: the demo always starts its own) and a proxy that does not exist (never asked: the
site is on loopback). Its figures are checked against the site's ground truth, computed here
from the construction and the decisions file, not from the demo's own scoring."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import psutil
import pytest

from dedup_worker.contract.messages import Decision, decode_decision
from dedup_worker.contract.reading import fold_decisions
from neardup.demo.planted import build_site
from neardup.demo.subtrees import build_subtree_site
from neardup.demo.truth import url_of

pytestmark = pytest.mark.integration

NEARDUP = Path(sys.executable).parent / "neardup"
SUPPRESSED = ("near_duplicate", "exact_duplicate")
UNREACHABLE = "192.0.2.1"  # TEST-NET-1


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        d for d in env.get("PATH", "").split(os.pathsep)
        if d and not (Path(d) / "dedup-worker").exists() and not (Path(d) / "scrapy").exists()
    )  # fmt: skip
    assert shutil.which("dedup-worker", path=env["PATH"]) is None
    env["NEARDUP_KAFKA_BOOTSTRAP"] = f"{UNREACHABLE}:9092"
    env["NEARDUP_REDIS_URL"] = f"redis://{UNREACHABLE}:6379/0"
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[name] = f"http://{UNREACHABLE}:3128"
    for name in ("no_proxy", "NO_PROXY"):
        env.pop(name, None)
    return env


def _watch(pid: int, seen: set[psutil.Process], done: threading.Event) -> None:
    """Every process the demo starts (broker, redis-server, workers, spider)."""
    while not done.wait(0.2):
        try:
            seen.update(psutil.Process(pid).children(recursive=True))
        except psutil.NoSuchProcess:
            return


def _final(path: Path) -> dict[str, Decision]:
    final = fold_decisions(decode_decision(line) for line in path.read_bytes().splitlines())
    return {key.url: decision for key, decision in final.items()}


@pytest.mark.timeout(900)
def test_demo_crawls_the_local_site_and_reports_what_it_found_and_saved(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    argv = [str(NEARDUP), "demo", "--out", str(out), "--workers", "2", "--quiet", "--keep-serving"]
    proc = subprocess.Popen(
        argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    seen: set[psutil.Process] = set()
    served = threading.Event()
    watcher = threading.Thread(target=_watch, args=(proc.pid, seen, served), daemon=True)
    watcher.start()
    lines = []
    for line in proc.stdout:  # until the site is left up for a browser, or the demo ends
        lines.append(line)
        if "Ctrl-C to stop" in line:
            break
    served.set()
    watcher.join()
    output = "".join(lines)
    assert proc.poll() is None, output[-3000:]
    assert len(seen) >= 5, f"expected broker, redis, 2 workers and the spider: {len(seen)}"
    figures = json.loads((out / "summary.json").read_text())
    base = figures["site"]
    # The site still answers, while the crawl's processes are all gone.
    with urllib.request.urlopen(base["docs"] + "/catalog/", timeout=60) as page:
        assert b"Catalog" in page.read()
    _, alive = psutil.wait_procs(list(seen), timeout=10)
    assert not alive, [p.pid for p in alive]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0

    final = _final(out / "decisions.jsonl")
    _check_against_the_construction(final, base, figures)
    report = (out / "report.html").read_text()
    assert "<img" in report and f"<b>{len(final):,}</b>pages decided" in report
    printed = output.replace("\n", " ")
    assert f"fetches {figures['full_fetches']} pages" in printed
    assert f"this crawl fetched {figures['fetched']} pages ({figures['saved']} fetches saved" in (
        printed
    )
    assert "pagination pages (alike, not duplicates): 16 of 16 fetched, 0 suppressed" in printed


def _check_against_the_construction(
    final: dict[str, Decision], base: dict[str, str], figures: dict[str, object]
) -> None:
    planted, docs = build_site(), build_subtree_site()
    pairs: dict[str, list[tuple[str, str]]] = {}
    for family in planted.families:
        pair = (url_of(base, family.duplicate), url_of(base, family.original))
        pairs.setdefault(f"planted {family.kind}", []).append(pair)
    for copy, original in docs.copies:
        pair = (url_of(base, copy), url_of(base, original))
        pairs.setdefault(f"docs {docs.family[copy]}", []).append(pair)
    assert len(pairs) == 11

    def found(copy: str, original: str) -> bool:
        a, b = final.get(copy), final.get(original)
        return (a is not None and a.verdict.value in SUPPRESSED and a.duplicate_of == original) or (
            b is not None and b.verdict.value in SUPPRESSED and b.duplicate_of == copy
        )

    missing = [family for family, members in pairs.items() if not any(found(*p) for p in members)]
    assert missing == [], "every planted family has a duplicate found"
    suppressed = {url for url, d in final.items() if d.verdict.value in SUPPRESSED}
    traps = {url_of(base, key) for key in docs.traps}
    assert traps <= set(final) and not traps & suppressed, "no pagination page suppressed"
    group = {url: original for members in pairs.values() for p in members for url in p
             for original in p[1:]}  # fmt: skip
    for url in suppressed:  # each suppressed page matched a page of its own group
        match = final[url].duplicate_of or ""
        assert url in group and group[url] == group.get(match), (url, match)
    assert figures["decided"] == figures["fetched"] == len(final)
    assert figures["found"] == len(suppressed) and figures["wrong"] == []
    assert figures["full_fetches"] == 517 and figures["traps_suppressed"] == []
    assert figures["saved"] == 517 - len(final)
    for kind in figures["kinds"]:  # type: ignore[attr-defined]
        assert kind["found"] >= 1, kind
        assert kind["found"] + kind["not_fetched"] + kind["missed"] == kind["copies"], kind
