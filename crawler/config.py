"""The crawler's configuration: ``NEARDUP_*`` Scrapy settings, environment variables, seeds.

The Kafka and Redis variables are the ones the dedup worker reads (``NEARDUP_KAFKA_BOOTSTRAP``,
``NEARDUP_REDIS_URL``, ``NEARDUP_REDIS_CLUSTER``, ``NEARDUP_PAGES_TOPIC``,
``NEARDUP_DECISIONS_TOPIC``, ``NEARDUP_PARTITIONS``, and the TLS/SASL/password settings of
:class:`~dedup_worker.adapters.kafka.KafkaSecurity` and
:class:`~dedup_worker.adapters.redis_client.RedisSecurity`, parsed by the same code), so one
environment drives a whole deployment. Every option is a Scrapy setting of the same name and an
environment variable: a setting (``-s NEARDUP_CRAWL_ID=...``, or a line in a project's
``settings.py``) wins over the variable, the variable over the default. :func:`crawl_config`
reads them all once per crawler into one frozen :class:`CrawlConfig`; a bad value stops the
crawl at start-up with a message naming the setting.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawler.extract import ExtractOptions
from crawler.urls import DEFAULT_DROP_PARAMS, canonicalize_url, host_of
from dedup_worker import config_values as parse
from dedup_worker import errors
from dedup_worker.adapters.kafka.settings import CODECS, KafkaSecurity, KafkaSettings
from dedup_worker.adapters.redis_client import RedisSecurity
from dedup_worker.adapters.security import Lookup, redact_url

logger = logging.getLogger(__name__)

MEMORY = "memory"

#: Settings that may come from the environment, with their defaults ("" = unset). Every other
#: ``NEARDUP_*`` crawler setting may too (see :func:`crawl_config`); these are the ones the
#: worker and ``neardup crawl`` share.
ENV_SETTINGS: dict[str, str] = {
    "NEARDUP_KAFKA_BOOTSTRAP": "",
    "NEARDUP_REDIS_URL": "",
    "NEARDUP_REDIS_CLUSTER": "",
    "NEARDUP_PAGES_TOPIC": "pages",
    "NEARDUP_DECISIONS_TOPIC": "decisions",
    "NEARDUP_PARTITIONS": "4",
    "NEARDUP_CRAWL_ID": "",
    "NEARDUP_PREDICTIONS_TOPIC": "decisions.predicted",
}

#: The built-in extractors of ``NEARDUP_EXTRACTOR`` (anything else is a dotted path).
FAST_EXTRACTOR = "fast"
BS4_EXTRACTOR = "bs4"


class ConfigError(errors.ConfigError, ValueError):
    """A setting or argument with a bad value; the message names it and what a good one is.

    The project's ``ConfigError`` (so ``NeardupError``), and a ``ValueError`` as it always was."""


@dataclass(frozen=True, repr=False)
class CrawlConfig:
    """What the neardup components of a crawler need, validated. Its ``repr`` shows no secret
    (nor a password in the Redis URL)."""

    kafka_bootstrap: str = ""
    kafka_compression: str = "none"
    redis_url: str = ""
    redis_cluster: bool = False
    pages_topic: str = "pages"
    decisions_topic: str = "decisions"
    #: Pages and decisions roll as generations (the worker's NEARDUP_TOPIC_GENERATIONS).
    topic_generations: bool = False
    partitions: int = 4
    crawl_id: str = ""
    max_depth: int | None = None
    max_pages: int | None = None
    max_inflight_bytes: int = 16 * 1024 * 1024
    max_message_bytes: int = 10 * 1024 * 1024
    decision_timeout: float = 120.0
    #: After a stop before the end (Ctrl-C) without ``JOBDIR``: how long the closing spider
    #: keeps applying decisions of pages it published, so a duplicate's outlinks are judged
    #: rather than left to a later run undecided (each then costs a fetch). 0: none.
    stop_grace: float = 5.0
    priority_levels: int = 100
    poll_interval: float = 0.05
    extractor: str = FAST_EXTRACTOR
    extract_options: ExtractOptions = field(default_factory=ExtractOptions)
    item_verdict: bool = False
    #: URL rules and the judging of duplicates' outlinks (issue 13); off: a duplicate's
    #: requests are all dropped and nothing is skipped by rule.
    rules: bool = True
    #: Processes of one crawl hand links to an idle one (:mod:`crawler.sharing`); needs Redis.
    share_work: bool = True
    predictions_topic: str = "decisions.predicted"
    #: Seconds a page's sketch is kept for direct comparisons in rule checks (0: none).
    rule_sketch_ttl: int = 3600
    #: Where the extension writes the crawl's ``dedup/*`` stats as JSON at close ("": nowhere).
    stats_file: str = ""
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)
    redis_security: RedisSecurity = field(default_factory=RedisSecurity)

    def __repr__(self) -> str:
        redis_security = self.redis_security.describe()
        return (
            f"CrawlConfig(kafka={self.kafka().describe()} "
            f"redis={redact_url(self.redis_url) or '(memory)'}"
            f"{' (cluster)' if self.redis_cluster else ''}"
            f"{f' ({redis_security})' if redis_security else ''} "
            f"topics={self.pages_topic}->{self.decisions_topic} crawl_id={self.crawl_id!r} "
            f"extractor={self.extractor})"
        )

    @property
    def publishing(self) -> bool:
        return bool(self.kafka_bootstrap)

    @property
    def shared_seen(self) -> bool:
        return self.redis_url not in ("", MEMORY)

    def kafka(self, client_id: str = "neardup-crawler") -> KafkaSettings:
        """The settings of the crawler's Kafka clients."""
        settings = KafkaSettings(
            self.kafka_bootstrap, client_id, self.kafka_security, compression=self.kafka_compression
        )
        if self.topic_generations:
            return settings.rolling_topics(self.pages_topic, self.decisions_topic)
        return settings


def env_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The shared ``NEARDUP_*`` settings taken from the environment, with their defaults."""
    env = os.environ if environ is None else environ
    return {name: env.get(name, default) for name, default in ENV_SETTINGS.items()}


class _Read:
    """One setting's value: the Scrapy setting if it is set (even to ""), else the environment
    variable, else None. Typed readers name the setting in their errors."""

    def __init__(self, settings: Any, environ: Mapping[str, str]) -> None:
        self._settings = settings
        self._environ = environ

    def raw(self, name: str) -> Any:
        if name in self._settings:
            return self._settings.get(name)
        return self._environ.get(name)

    def text(self, name: str, default: str = "") -> str:
        value = self.raw(name)
        return default if value is None or str(value).strip() == "" else str(value).strip()

    def number(self, name: str, default: float, kind: Callable[[Any], Any] = float) -> Any:
        value = self.raw(name)
        if value is None or value == "":
            return default
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be a number, got {value!r}") from None

    def flag(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name} must be true or false, got {value!r}")

    def names(self, name: str) -> list[str]:
        value = self.raw(name)
        if value is None or value == "":
            return []
        if isinstance(value, str):
            return value.replace(",", " ").split()
        return [str(item) for item in value]


def crawl_config(settings: Any, environ: Mapping[str, str] | None = None) -> CrawlConfig:
    """Build the validated config from Scrapy settings (``settings.get`` and ``in``) and the
    environment (``os.environ`` unless given)."""
    read = _Read(settings, os.environ if environ is None else environ)
    config = CrawlConfig(
        kafka_bootstrap=read.text("NEARDUP_KAFKA_BOOTSTRAP"),
        kafka_compression=read.text("NEARDUP_KAFKA_COMPRESSION", "none").lower(),
        redis_url=read.text("NEARDUP_REDIS_URL"),
        redis_cluster=read.flag("NEARDUP_REDIS_CLUSTER", False),
        pages_topic=read.text("NEARDUP_PAGES_TOPIC", "pages"),
        decisions_topic=read.text("NEARDUP_DECISIONS_TOPIC", "decisions"),
        topic_generations=read.flag("NEARDUP_TOPIC_GENERATIONS", False),
        partitions=read.number("NEARDUP_PARTITIONS", 4, int),
        crawl_id=read.text("NEARDUP_CRAWL_ID"),
        max_depth=optional_int(read.raw("NEARDUP_MAX_DEPTH"), "NEARDUP_MAX_DEPTH"),
        max_pages=optional_int(read.raw("NEARDUP_MAX_PAGES"), "NEARDUP_MAX_PAGES", minimum=1),
        max_inflight_bytes=read.number("NEARDUP_MAX_INFLIGHT_BYTES", 16 * 1024 * 1024, int),
        max_message_bytes=read.number("NEARDUP_MAX_MESSAGE_BYTES", 10 * 1024 * 1024, int),
        decision_timeout=read.number("NEARDUP_DECISION_TIMEOUT", 120.0),
        stop_grace=read.number("NEARDUP_STOP_GRACE", 5.0),
        priority_levels=read.number("NEARDUP_PRIORITY_LEVELS", 100, int),
        poll_interval=read.number("NEARDUP_POLL_INTERVAL", 0.05),
        extractor=read.text("NEARDUP_EXTRACTOR", FAST_EXTRACTOR),
        extract_options=ExtractOptions(
            include_alt_text=read.flag("NEARDUP_INCLUDE_ALT_TEXT", False),
            respect_nofollow=read.flag("NEARDUP_RESPECT_NOFOLLOW", True),
            drop_params=frozenset(read.names("NEARDUP_DROP_PARAMS") or DEFAULT_DROP_PARAMS),
        ),
        item_verdict=read.flag("NEARDUP_ITEM_VERDICT", False),
        rules=read.flag("NEARDUP_RULES", True),
        share_work=read.flag("NEARDUP_SHARE_WORK", True),
        predictions_topic=read.text("NEARDUP_PREDICTIONS_TOPIC", "decisions.predicted"),
        rule_sketch_ttl=read.number("NEARDUP_RULE_SKETCH_TTL", 3600, int),
        stats_file=read.text("NEARDUP_STATS_FILE"),
        kafka_security=KafkaSecurity.from_settings(_lookup(settings)),
        redis_security=RedisSecurity.from_settings(_lookup(settings)),
    )
    _validate(config)
    return config


def _lookup(settings: Any) -> Lookup:
    """A security setting: the Scrapy setting of that name, else the environment variable
    (they are not in ``crawler.settings``, so no Scrapy settings dump can show a secret)."""

    def get(name: str) -> str | None:
        value = settings.get(name)
        return str(value) if value not in (None, "") else os.environ.get(name)

    return get


def _validate(config: CrawlConfig) -> None:
    checks = [
        (config.partitions >= 1, "NEARDUP_PARTITIONS must be >= 1"),
        (
            config.kafka_compression in CODECS,
            f"NEARDUP_KAFKA_COMPRESSION must be one of {', '.join(CODECS)}, "
            f"got {config.kafka_compression!r}",
        ),
        (config.max_inflight_bytes >= 1024, "NEARDUP_MAX_INFLIGHT_BYTES must be >= 1024"),
        (config.max_message_bytes >= 1024, "NEARDUP_MAX_MESSAGE_BYTES must be >= 1024"),
        (config.decision_timeout > 0, "NEARDUP_DECISION_TIMEOUT must be > 0 seconds"),
        (config.stop_grace >= 0, "NEARDUP_STOP_GRACE must be >= 0 seconds"),
        (1 <= config.priority_levels <= 10_000, "NEARDUP_PRIORITY_LEVELS must be 1..10000"),
        (config.poll_interval > 0, "NEARDUP_POLL_INTERVAL must be > 0 seconds"),
        (config.rule_sketch_ttl >= 0, "NEARDUP_RULE_SKETCH_TTL must be >= 0 seconds"),
        (
            config.predictions_topic not in (config.pages_topic, config.decisions_topic),
            "NEARDUP_PREDICTIONS_TOPIC must differ from the pages and decisions topics",
        ),
        (
            "{" not in config.crawl_id and "}" not in config.crawl_id,
            "NEARDUP_CRAWL_ID must not contain '{' or '}' (it names Redis keys)",
        ),
        (
            not config.redis_cluster or config.shared_seen,
            "NEARDUP_REDIS_CLUSTER is set but NEARDUP_REDIS_URL names no Redis server",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    _check_services(config)
    if config.shared_seen:
        config.redis_security.check_url(config.redis_url)


def _check_services(config: CrawlConfig) -> None:
    """The worker's rules for the broker list, the Redis URL and the topic names: a value the
    workers would refuse at their start-up is refused at the crawler's too, in the same words
    (a topic name the broker would take but the workers refuse left the crawl waiting for
    decisions that never came)."""
    topics = {
        "NEARDUP_PAGES_TOPIC": config.pages_topic,
        "NEARDUP_DECISIONS_TOPIC": config.decisions_topic,
        "NEARDUP_PREDICTIONS_TOPIC": config.predictions_topic,
    }
    try:
        if config.kafka_bootstrap:
            parse.bootstrap(config.kafka_bootstrap, "NEARDUP_KAFKA_BOOTSTRAP")
        if config.redis_url:
            parse.redis_url(config.redis_url, "NEARDUP_REDIS_URL")
        for setting, topic in topics.items():
            parse.topic(topic, setting)
    except errors.ConfigError as exc:
        raise ConfigError(str(exc)) from None


# ---- seeds and scope ---------------------------------------------------------------------------


def parse_seeds(
    seeds: str | Iterable[str] | None, seed_file: str | Path | None = None
) -> list[str]:
    """Canonical http(s) seed URLs from a comma/space separated string, a list and/or a file
    (one URL per line, ``#`` comments), in order, without repeats."""
    raw: list[str] = []
    if isinstance(seeds, str):
        raw.extend(seeds.replace(",", " ").split())
    elif seeds is not None:
        raw.extend(seeds)
    if seed_file:
        raw.extend(_seed_file_lines(Path(seed_file)))
    result: list[str] = []
    for url in raw:
        canonical = _canonical_seed(url)
        if canonical not in result:
            result.append(canonical)
    return result


def _seed_file_lines(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read seed file {str(path)!r}: {exc.strerror}") from None
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def _canonical_seed(url: str) -> str:
    if not url.lower().startswith(("http://", "https://")) or not host_of(url):
        raise ConfigError(f"seed {url!r} is not an http(s) URL with a host")
    return canonicalize_url(url)


def parse_domains(domains: str | Iterable[str] | None, seeds: Iterable[str]) -> list[str]:
    """Allowed domains: the given ones (comma/space separated), else the seeds' hosts."""
    listed = domains.replace(",", " ").split() if isinstance(domains, str) else list(domains or [])
    chosen = listed or [host_of(url) for url in seeds]
    return sorted({d.strip().lower().rstrip(".") for d in chosen if d.strip()})


def optional_int(value: Any, name: str, minimum: int = 0) -> int | None:
    """A spider argument such as ``max_depth``: ``None``/"" means no limit."""
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {number}")
    return number


def default_crawl_id(seeds: Iterable[str]) -> str:
    """Stable id of a crawl from its seeds, so that re-running the same seeds resumes it."""
    digest = hashlib.blake2b("\n".join(sorted(seeds)).encode(), digest_size=6).hexdigest()
    return f"seeds-{digest}"
