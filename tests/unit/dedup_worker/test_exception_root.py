"""One exception root: whatever the project raises on purpose is a ``NeardupError``."""

from __future__ import annotations

import pytest

import dedup_worker.errors as root
from crawler.config import ConfigError as CrawlerConfigError
from crawler.config import optional_int
from dedup_worker.adapters.kafka import BrokerError, OwnershipLost
from neardup.crawl_run import CrawlError
from neardup.errors import NeardupError, StackError


def test_the_old_names_are_one_root() -> None:
    assert NeardupError is root.NeardupError
    for error in (StackError, CrawlError, BrokerError, OwnershipLost, root.BackendUnavailable):
        assert issubclass(error, root.NeardupError)


def test_the_crawlers_config_error_is_the_projects_and_still_a_value_error() -> None:
    assert issubclass(CrawlerConfigError, root.ConfigError)
    assert issubclass(CrawlerConfigError, ValueError)
    with pytest.raises(root.ConfigError, match="max_pages must be >= 1"):
        optional_int("0", "max_pages", minimum=1)
