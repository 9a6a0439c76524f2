"""NEARDUP_EXTRACTOR: the built-ins, a dotted path, and bad values refused at start-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from scrapy.settings import Settings

from crawler import extract, extract_bs4
from crawler.config import ConfigError, crawl_config
from crawler.extractors import load_extractor
from tests.support.paths import FIXTURES, REPO

FIXTURES = FIXTURES / "html"


def test_built_ins_and_dotted_paths() -> None:
    assert load_extractor("fast") is extract.extract
    assert load_extractor("bs4") is extract_bs4.extract
    assert load_extractor("crawler.extract_bs4.extract") is extract_bs4.extract
    assert load_extractor("crawler.extract_bs4:extract") is extract_bs4.extract
    assert crawl_config(Settings({}), {}).extractor == "fast"


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.glob("*.html")))
def test_the_bs4_setting_extracts_what_the_fast_one_does(name: str) -> None:
    body = (FIXTURES / name).read_bytes()
    url, options = "http://example.com/dir/page.html", crawl_config(Settings({}), {})
    fast, bs4 = load_extractor("fast"), load_extractor("bs4")
    assert fast(body, url, None, options.extract_options) == bs4(
        body, url, None, options.extract_options
    )


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("lxml", "is not 'fast', 'bs4' nor a dotted path"),
        ("no_such_module.extract", "cannot import 'no_such_module'"),
        ("crawler.extract.no_such_function", "'crawler.extract' has no 'no_such_function'"),
        ("crawler.extract.DEFAULT_OPTIONS", "is not callable"),
        ("crawler.urls.host_of", "cannot be called with (body, url, declared_encoding, options)"),
    ],
)
def test_a_bad_value_names_the_setting_and_what_to_put(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_extractor(value)
    message = str(raised.value)
    assert f"NEARDUP_EXTRACTOR={value!r}" in message and says in message
    assert "'fast' (the default), 'bs4', or the dotted path" in message


def _scrapy(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEARDUP_", "SCRAPY_"))}
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", *argv],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_crawl_with_a_bad_extractor_stops_before_fetching_naming_the_setting() -> None:
    """The neardup spider and a project's spider: the crawl stops at start-up (nothing is
    fetched, no broker needed) with the message saying what to set."""
    runs = [
        _scrapy(REPO, "neardup", "-a", "seeds=http://127.0.0.2:9/",
                "-s", "NEARDUP_EXTRACTOR=no_such_module.extract"),
        _scrapy(REPO / "examples" / "myproject", "pages", "-a", "start_urls=http://127.0.0.2:9/",
                "-s", "NEARDUP_KAFKA_BOOTSTRAP=127.0.0.1:9", "-s", "NEARDUP_EXTRACTOR=lxml"),
    ]  # fmt: skip
    expected = ["cannot import 'no_such_module'", "is not 'fast', 'bs4'"]
    for run, says in zip(runs, expected, strict=True):
        assert run.returncode != 0, run.stderr[-2000:]
        assert "NEARDUP_EXTRACTOR=" in run.stderr and says in run.stderr, run.stderr[-2000:]
        assert "Crawled" not in run.stderr


def test_a_project_missing_a_component_line_stops_naming_it() -> None:
    run = _scrapy(
        REPO / "examples" / "myproject", "pages", "-a", "start_urls=http://127.0.0.2:9/",
        "-s", "NEARDUP_KAFKA_BOOTSTRAP=127.0.0.1:9", "-s", "EXTENSIONS={}",
    )  # fmt: skip
    assert run.returncode != 0, run.stderr[-2000:]
    assert 'EXTENSIONS = {"crawler.scheduling.DecisionScheduler": 500}' in run.stderr
    assert "Crawled" not in run.stderr
