"""``neardup worker`` is ``dedup-worker``: every argument after ``worker`` is the worker's."""

from __future__ import annotations

import pytest

from neardup.cli import main


def test_the_worker_takes_its_flags_and_its_help_through_neardup(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """argparse's REMAINDER left option-like arguments to the umbrella parser, which refused
    ``neardup worker --k 5`` and ``neardup worker --help`` (exit 2, "unrecognized arguments")."""
    with pytest.raises(SystemExit) as help_exit:
        main(["worker", "--help"])
    assert help_exit.value.code == 0
    assert "usage: dedup-worker" in capsys.readouterr().out
    assert main(["-vvv", "worker", "--k", "99"]) == 2  # the worker's own configuration check
    error = capsys.readouterr().err
    assert "dedup-worker: configuration error: --k must be an integer 0..8, got 99" in error
    assert "unrecognized arguments" not in error
