"""The URL rules of a crawl as a table: what ``neardup crawl`` saves and ``neardup report`` shows.

A crawl's rules live in its rule store (Redis, ``neardup:crawl:{<crawl id>}:rules:*``), which
outlives the crawl but not the embedded stack of ``neardup crawl``; so at the end of a crawl
``neardup crawl`` writes them next to the decisions file (``decisions.rules.json`` for
``decisions.jsonl``), one row per rule: its key and kind, its state, its support (successful
checks), checks, measured precision, the Wilson lower bound that had to reach the policy's
activation level, and the fetches its predictions saved. Pure: no Redis here (the caller reads
the store's :meth:`~crawler.rules.store.RuleStore.statuses`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from crawler.rules.policy import DEFAULT_POLICY, RulePolicy, State
from crawler.rules.rewrite import parse_rule
from crawler.rules.store import RuleStatus
from neardup.errors import NeardupError

STATE_NAMES = {State.ACTIVE: "active", State.CANDIDATE: "candidate", State.DROPPED: "dropped"}
_ORDER = {"active": 0, "dropped": 1, "candidate": 2}


class RulesFileError(NeardupError):
    """A rules file cannot be read; the message names it and says why."""


@dataclass(frozen=True)
class RuleRow:
    key: str
    kind: str
    state: str
    support: int
    checks: int
    precision: float
    lower_bound: float
    saved: int


def rule_rows(
    statuses: Mapping[str, RuleStatus], policy: RulePolicy = DEFAULT_POLICY
) -> list[RuleRow]:
    """One row per rule: active ones first (most fetches saved first), then dropped, then
    candidates (most checks first)."""
    rows = [
        RuleRow(
            key=key,
            kind=_kind(key),
            state=STATE_NAMES[status.state],
            support=status.evidence.successes,
            checks=status.checks,
            precision=round(status.precision, 4),
            lower_bound=round(status.lower_bound(policy), 4),
            saved=status.saved,
        )
        for key, status in statuses.items()
    ]
    return sorted(rows, key=lambda r: (_ORDER[r.state], -r.saved, -r.checks, r.key))


def _kind(key: str) -> str:
    try:
        return parse_rule(key).kind
    except ValueError:
        return "?"


def write_rules(path: Path, rows: Sequence[RuleRow]) -> None:
    path.write_text(json.dumps({"rules": [asdict(row) for row in rows]}, indent=1))


def read_rules(path: Path) -> list[RuleRow]:
    try:
        body = json.loads(path.read_text())
        return [RuleRow(**item) for item in body["rules"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RulesFileError(f"cannot read the rules file {path}: {exc}") from exc


def rules_path(decisions: Path) -> Path:
    """Where ``neardup crawl`` writes the rules of a crawl whose decisions go to ``decisions``."""
    return decisions.with_name(decisions.stem + ".rules.json")


def rules_text(rows: Sequence[RuleRow], limit: int = 10) -> list[str]:
    """A plain-text table of the first ``limit`` rows, for the console."""
    lines = [f"{'state':<10}{'support':>8}{'checks':>8}{'precision':>10}{'saved':>7}  rule"]
    for row in rows[:limit]:
        lines.append(
            f"{row.state:<10}{row.support:>8}{row.checks:>8}{row.precision:>10.3f}"
            f"{row.saved:>7}  {row.key}"
        )
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more")
    return lines


def rules_html(rows: Sequence[RuleRow]) -> str:
    """The report's section: counts by state and the table (empty rows: a one-line note)."""
    if not rows:
        return "<h2>URL rules</h2><p>No URL rule was learned (or no rules file was found).</p>"
    counts = {name: sum(1 for r in rows if r.state == name) for name in _ORDER}
    saved = sum(r.saved for r in rows)
    cells = "".join(
        f"<tr><td>{html.escape(r.state)}</td><td>{html.escape(r.kind)}</td>"
        f"<td><code>{html.escape(r.key)}</code></td><td>{r.support:,}</td><td>{r.checks:,}</td>"
        f"<td>{r.precision:.3f}</td><td>{r.lower_bound:.3f}</td><td>{r.saved:,}</td></tr>"
        for r in rows
    )
    return (
        f"<h2>URL rules</h2><p>{counts['active']} active, {counts['candidate']} candidates, "
        f"{counts['dropped']} dropped; {saved:,} fetches saved.</p>"
        "<table><tr><th>state</th><th>kind</th><th>rule</th><th>support</th><th>checks</th>"
        "<th>precision</th><th>lower bound</th><th>fetches saved</th></tr>"
        f"{cells}</table>"
    )
