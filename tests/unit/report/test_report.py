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
from neardup.report import summarise, suppressed_links


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


def test_report_command_writes_html_with_plots(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(_decisions(tmp_path)), "-o", str(out)]) == 0
    page = out.read_text()
    assert len(re.findall(r"src='data:image/png;base64,", page)) == 4
    assert "<b>15</b>pages decided" in page and "1.5 MB" in page


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    assert main(["report", str(tmp_path / "nope.jsonl")]) == 2
