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


def test_precision_and_recall_by_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a-b and a-d are near-duplicates; c is unique. "b" and "c" in one source, "d" another.
    sources = {"a": "orig", "b": "mirror", "c": "mirror", "d": "edits"}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": k, "text": v, "source": sources[k]}) + "\n" for k, v in PAGES.items()
        )
    )
    out = tmp_path / "out"
    args = ["eval", str(corpus), "--out", str(out), "--no-plots", "-d", "hybrid:k=3,threshold=0.9"]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    by_source = summary["detectors"][0]["page_by_source"]
    assert sorted(by_source) == ["edits", "mirror", "orig"]
    assert by_source["mirror"]["positives"] == 1 and by_source["mirror"]["recall"] == 1.0
    assert by_source["orig"]["positives"] == 0 and by_source["orig"]["predicted"] == 0
    total = summary["detectors"][0]["page"]
    assert sum(s["positives"] for s in by_source.values()) == total["positives"]
    assert sum(s["true_positive"] for s in by_source.values()) == total["true_positive"]
    assert "page P/R by source: edits" in capsys.readouterr().out


def test_a_directory_groups_pages_by_their_first_folder(tmp_path: Path) -> None:
    for host, names in (("one.example", "ab"), ("two.example", "cd")):
        (tmp_path / "site" / host).mkdir(parents=True)
        for name in names:
            body = f"<html><body><p>{PAGES[name]}</p></body></html>"
            (tmp_path / "site" / host / f"{name}.html").write_text(body)
    out = tmp_path / "out"
    args = ["eval", str(tmp_path / "site"), "--out", str(out), "--no-plots", "-d", "simhash:k=3"]
    assert main(args) == 0
    by_source = json.loads((out / "summary.json").read_text())["detectors"][0]["page_by_source"]
    assert sorted(by_source) == ["one.example", "two.example"]
    assert by_source["one.example"]["positives"] == 1  # b after a


def test_missed_pages_are_told_apart_by_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _jsonl(tmp_path / "corpus.jsonl")
    out = tmp_path / "out"
    # k = 0 reaches no pair that differs at all; a threshold of 1.0 turns every pair down.
    args = ["eval", str(corpus), "--out", str(out), "--no-plots"]
    assert main([*args, "-d", "simhash:k=0", "-d", "hybrid:title_weight=0,k=12,threshold=1.0"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    near, strict = summary["detectors"]
    positives = near["page"]["positives"]
    assert positives >= 1
    assert near["missed"] == {
        "beyond_reach": positives - near["page"]["true_positive"],
        "rejected": 0,
    }
    assert strict["missed"] == {"beyond_reach": 0, "rejected": positives}
    assert f"missed: 0 beyond reach, {positives} rejected" in capsys.readouterr().out
