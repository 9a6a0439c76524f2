"""``neardup eval`` end to end: JSONL and HTML corpora, labelled pairs, summary and plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neardup.cli import main

BASE = " ".join(f"word{i} filler{i % 7}" for i in range(120))
PAGES = {
    "a": BASE,
    "b": BASE.replace("word5 ", "changed "),  # J ~ 0.98 with a
    "c": " ".join(f"other{i} filler{i % 5}" for i in range(120)),
    "d": BASE.replace("word1", "x").replace("word3", "y").replace("word9", "z"),
}


def _jsonl(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in PAGES.items()))
    return path


def test_eval_jsonl_writes_summary_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _jsonl(tmp_path / "corpus.jsonl")
    out = tmp_path / "out"
    args = ["eval", str(corpus), "--out", str(out), "-d", "simhash:k=3", "-d", "minhash"]
    args += ["-d", "hybrid:title_weight=0,k=3"]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["corpus"]["pages"] == 4
    assert summary["corpus"]["positive_pairs"] >= 1
    hybrid = summary["detectors"][2]
    assert len(hybrid["by_distance"]) == 13
    assert hybrid["page"]["recall"] == 1.0
    for name in ("precision_recall.png", "resemblance.png", "estimate.png"):
        assert (out / name).stat().st_size > 1000
    assert "hybrid:title_weight=0,k=3" in capsys.readouterr().out


def _positives(tmp_path: Path, corpus: Path, labelled: list[tuple[str, str, bool]]) -> int:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(json.dumps({"a": a, "b": b, "label": v}) + "\n" for a, b, v in labelled)
    )
    out = tmp_path / "out"
    args = ["eval", str(corpus), "--pairs", str(pairs), "--out", str(out), "--no-plots"]
    assert main([*args, "-d", "simhash:k=3"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert not (out / "precision_recall.png").exists()
    positives: int = summary["corpus"]["positive_pairs"]
    return positives


def test_labelled_pairs_override_the_reference(tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "corpus.jsonl")
    reference = _positives(tmp_path, corpus, [])
    assert _positives(tmp_path, corpus, [("a", "b", False)]) == reference - 1
    assert _positives(tmp_path, corpus, [("c", "a", True), ("a", "zz", True)]) == reference + 1


def test_eval_html_directory(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    for name, text in PAGES.items():
        html = f"<html><head><title>{name}</title></head><body><p>{text}</p></body></html>"
        (site / f"{name}.html").write_text(html)
    out = tmp_path / "out"
    assert main(["eval", str(site), "--out", str(out), "--no-plots", "-d", "simhash:k=3"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["corpus"]["pages"] == 4


def test_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    assert main(["eval", str(bad)]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
    assert main(["eval", str(_jsonl(tmp_path / "c.jsonl")), "-d", "nonsense"]) == 2
