"""The crawl report from a real decision stream produced by the engine."""

from __future__ import annotations

import random
import re
from pathlib import Path

from dedup_worker.contract.messages import Page
from dedup_worker.core.design import build_design
from dedup_worker.core.engine import DedupEngine
from dedup_worker.core.memory_index import InMemoryIndex
from dedup_worker.core.records import MemoryDocStore
from neardup.cli import main
from neardup.crawl_record import Tally, summary_lines
from neardup.report import render_html, summarise, suppressed_links


def _decisions(tmp_path: Path) -> Path:
    rng = random.Random(1)
    vocab = [f"v{i}" for i in range(3000)]
    engine = DedupEngine(InMemoryIndex(build_design(3, (4,))), MemoryDocStore())
    pages = []
    for family in range(5):
        body = " ".join(rng.choice(vocab) for _ in range(300))
        links = tuple(f"http://h{family}.test/sub{i}" for i in range(3))
        for member in range(3):
            host = f"m{member}.test"
            pages.append(Page(url=f"http://{host}/{family}", host=host, fetched_at=10.0 * family
                              + member, text=body, outlinks=links))  # fmt: skip
    out = tmp_path / "decisions.jsonl"
    decisions = []
    for page in reversed(pages):  # later pages first, one at a time: corrections happen
        decisions += engine.process([page])
    out.write_bytes(b"\n".join(d.to_json() for d in decisions) + b"\n{broken\n")
    return out


def test_summary_applies_corrections(tmp_path: Path) -> None:
    summary = summarise(_decisions(tmp_path).read_bytes().splitlines())
    assert len(summary.final) == 15 and summary.undecodable == 1
    assert summary.verdicts["unique"] == 5 and len(summary.suppressed) == 10
    assert suppressed_links(summary) == 10 * 3
    assert summary.corrections == 10


def test_a_recrawls_unchanged_duplicates_count_as_suppressed(tmp_path: Path) -> None:
    """A recrawl decides every page ``unchanged``; the mirrors keep their standing as
    duplicates, and the summary counts them and their outlinks as suppressed."""
    engine = DedupEngine(InMemoryIndex(build_design(3, (4,))), MemoryDocStore())
    rng = random.Random(2)
    vocab = [f"v{i}" for i in range(3000)]
    bodies = [" ".join(rng.choice(vocab) for _ in range(300)) for _ in range(4)]
    links = tuple(f"http://h.test/sub{i}" for i in range(3))

    def crawl(at: float) -> list[bytes]:
        pages = [
            Page(url=f"http://m{m}.test/{f}", host=f"m{m}.test", fetched_at=at + 10 * f + m,
                 text=body, outlinks=links)
            for f, body in enumerate(bodies) for m in range(2)
        ]  # fmt: skip
        return [d.to_json() for d in engine.process(pages)]

    crawl(0.0)
    summary = summarise(crawl(1000.0))
    assert summary.verdicts == {"unchanged": 8}
    assert len(summary.suppressed) == 4 and suppressed_links(summary) == 4 * 3
    assert {d.url for d in summary.suppressed} == {f"http://m1.test/{f}" for f in range(4)}


def test_crawl_summary_and_report_agree_with_redeliveries(tmp_path: Path) -> None:
    """Every decision arrives twice (a crash, a rebalance, an aborted transaction shown
    anyway): ``neardup crawl``'s summary and ``neardup report`` still count each page, each
    correction and each suppressed outlink once, and agree with each other."""
    lines = [line for line in _decisions(tmp_path).read_bytes().splitlines() if line]
    redelivered = [line for line in lines for _ in range(2)]
    tally = Tally()
    for line in redelivered:
        tally.add(line)
    printed = "\n".join(summary_lines(tally.summary))
    report = summarise(redelivered)
    assert re.search(r"^unique\s+5$", printed, re.M)
    assert re.search(r"^total\s+15$", printed, re.M)
    assert "outlinks suppressed: 30; corrections: 10" in printed
    assert suppressed_links(report) == 30 and report.corrections == 10
    assert report.verdicts == tally.summary.verdicts
    html = render_html(report, page_bytes=1000)
    assert "<b>10</b>corrections" in html and "<b>0.0 MB</b>" in html  # 30 KB saved


def test_report_command_writes_html_with_plots(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(_decisions(tmp_path)), "-o", str(out)]) == 0
    page = out.read_text()
    assert len(re.findall(r"src='data:image/png;base64,", page)) == 4
    assert "<b>15</b>pages decided" in page and "1.5 MB" in page


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    assert main(["report", str(tmp_path / "nope.jsonl")]) == 2
