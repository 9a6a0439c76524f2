"""The URL rules table: rows from a rule store, the file neardup crawl writes, the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.rules.learning import Observation
from crawler.rules.rewrite import ParamRule, PathRewrite
from crawler.rules.store import MemoryRuleStore
from neardup.cli import main
from neardup.rules_table import (
    RulesFileError,
    read_rules,
    rule_rows,
    rules_html,
    rules_path,
    rules_text,
    write_rules,
)

M, D = "http://mirror.test", "http://docs.test"


def store() -> MemoryRuleStore:
    rules = MemoryRuleStore()
    alias, sort = PathRewrite(M, "", D, ""), ParamRule(D, "page")
    rules.record([Observation(alias, f"{M}/p{i}", f"{D}/p{i}", True) for i in range(12)])
    rules.record([Observation(sort, f"{D}/l?page={i}", f"{D}/l", i < 2) for i in range(4)])
    rules.add_saved({alias.key: 30})
    return rules


def test_rows_list_active_rules_first_with_support_precision_and_fetches_saved() -> None:
    rows = rule_rows(store().statuses())
    assert [(r.state, r.kind) for r in rows] == [("active", "host"), ("dropped", "param")]
    active = rows[0]
    assert (active.support, active.checks, active.precision, active.saved) == (12, 12, 1.0, 30)
    assert active.lower_bound >= 0.8
    assert rows[1].precision == 0.5 and rows[1].saved == 0
    assert "active" in rules_text(rows)[1] and "30" in rules_text(rows)[1]


def test_the_rules_file_round_trips_and_a_bad_one_names_itself(tmp_path: Path) -> None:
    rows = rule_rows(store().statuses())
    path = rules_path(tmp_path / "decisions.jsonl")
    assert path.name == "decisions.rules.json"
    write_rules(path, rows)
    assert read_rules(path) == rows
    path.write_text("{}")
    with pytest.raises(RulesFileError, match=r"decisions\.rules\.json"):
        read_rules(path)


def test_the_report_shows_the_rules_beside_the_decisions(tmp_path: Path) -> None:
    decisions = tmp_path / "decisions.jsonl"
    decisions.write_bytes(b"")
    write_rules(rules_path(decisions), rule_rows(store().statuses()))
    out = tmp_path / "report.html"
    assert main(["report", str(decisions), "-o", str(out)]) == 0
    page = out.read_text()
    assert "URL rules" in page and "1 active" in page and f"host {M} {D}" in page
    assert "<td>30</td>" in page
    assert "No URL rule" in rules_html([])
