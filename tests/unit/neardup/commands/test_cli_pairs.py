"""``neardup pairs`` / ``plan`` / ``fingerprint`` through the real console entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from neardup.cli import main
from tests.support.hamming_oracle import brute_pairs


def _write(path: Path, values: np.ndarray) -> Path:
    path.write_text("".join(f"{int(v):016x}\n" for v in values))
    return path


def test_pairs_output_matches_oracle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(9)
    base = rng.integers(0, 2**64, size=300, dtype=np.uint64)
    fps = np.concatenate([base, base[:100] ^ np.uint64(0b111), base[:50] ^ np.uint64(1 << 63)])
    assert main(["pairs", str(_write(tmp_path / "f.txt", fps)), "-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{i} {j} {d}" for i, j, d in brute_pairs(fps, 3)]


def test_console_script_and_clusters(tmp_path: Path) -> None:
    exe = shutil.which("neardup", path=str(Path(sys.executable).parent))
    assert exe, "the neardup console script is installed with the package"
    fps = np.array([0, 1, 2**40 - 1, 3], dtype=np.uint64)
    out = subprocess.run(
        [exe, "pairs", str(_write(tmp_path / "f.txt", fps)), "-k", "2", "--clusters"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.splitlines() == ["0 0", "1 0", "2 2", "3 0"]


def test_bad_line_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "f.txt"
    path.write_text("0000000000000001\nnot-hex\n")
    assert main(["pairs", str(path)]) == 2
    assert "line 2 is not a 16-hex-digit fingerprint" in capsys.readouterr().err


def test_plan_explains(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-n", "1e7", "-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "plan for 10,000,000 fingerprints" in out and "cand./probe" in out


def test_fingerprint_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "docs.txt"
    path.write_text("The quick brown fox jumps over the lazy dog.\n\n")
    assert main(["fingerprint", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["524b7326184767b5", "0000000000000000"]
