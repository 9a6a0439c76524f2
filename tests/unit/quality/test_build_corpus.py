"""The text extraction helpers of ``tools/build_corpus.py`` (man pages, docstrings, sampling)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).parents[3] / "tools" / "build_corpus.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_corpus", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_corpus", module)
    spec.loader.exec_module(module)
    return module


def test_troff_text_keeps_words_and_drops_markup() -> None:
    source = (
        '.\\" a comment\n.TH LS 1\n.SH NAME\nls \\- list \\fBdirectory\\fR contents\n.PP\n.B \\-a\n'
    )
    text = _tool().troff_text(source)
    assert text.split() == ["NAME", "ls", "-", "list", "directory", "contents", "-a"]


def test_docstrings_of_python2_and_python3_sources() -> None:
    tool = _tool()
    py2 = (
        'u"""Module doc."""\nprint "x"\n'
        "def f():\n    r'''Function doc.'''\n    x = 'not a doc'\n"
    )
    assert tool.docstrings(py2) == "Module doc.\n\nFunction doc."
    assert tool.docstrings("def broken(:\n") == ""


def test_sampling_is_deterministic() -> None:
    tool = _tool()
    assert tool.stable_fraction("x") == tool.stable_fraction("x") != tool.stable_fraction("y")
    assert [tool.sampled(f"k{i}", 0.5) for i in range(20)] == [
        tool.sampled(f"k{i}", 0.5) for i in range(20)
    ]
