"""The close's hand-over order with ``JOBDIR`` (:class:`crawler.closing.Closing`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from crawler.closing import Closing
from crawler.seen import MemorySeenStore


class _Sharing:
    """A journaling process's sharing: records the close's steps in order."""

    def __init__(self, steps: list[str], journals: bool = True) -> None:
        self.steps = steps
        self.token = "host:1:mark-abc"
        self.fingerprint = (lambda request: b"") if journals else None
        self.taken_from_killed = 0

    def flush(self) -> int:
        self.steps.append("flush")
        return 0

    def leave(self, keep_journal: bool = False) -> None:
        self.steps.append(f"leave keep_journal={keep_journal}")


def _closing(sharing: _Sharing) -> Any:
    closing: Any = Closing()
    closing.links = SimpleNamespace(sharing=sharing)
    closing.stats = SimpleNamespace(set_value=lambda key, value: None)
    store = MemorySeenStore()
    seen = SimpleNamespace(store=store, flush=lambda: sharing.steps.append("settle"))
    closing.session = SimpleNamespace(seen=lambda: seen)
    return closing


@pytest.mark.parametrize(("jobdir", "journals"), [(True, True), (False, True), (True, False)])
def test_the_resume_file_names_the_kept_journal_before_the_process_leaves(
    jobdir: bool, journals: bool
) -> None:
    """With ``JOBDIR`` a journaling process keeps its journal as it leaves, for the resume to
    adopt; the resume file naming it is written first (a kill between the two leaves the
    process in the table, taken over as any killed one). Without, nothing is kept."""
    steps: list[str] = []
    sharing = _Sharing(steps, journals)
    _closing(sharing)._leave_sharing(lambda journal: steps.append(f"resume {journal!r}"), jobdir)
    keep = jobdir and journals
    named = repr(sharing.token if keep else "")
    settled = ["settle"] if keep else []  # what was decided since leaves the journal kept
    assert steps == ["flush", *settled, f"resume {named}", f"leave keep_journal={keep}"]
