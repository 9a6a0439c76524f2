"""The rule store in Redis (single server or Redis Cluster): rules shared by every crawler
process of a crawl, kept across restarts (as long as Redis keeps its data).

Keys are ``neardup:crawl:{<crawl id>}:rules:*`` (layout in :mod:`crawler.rules.redis_lua`):
the hash tag puts a crawl's rules in one cluster slot, so every check-then-update is one Lua
call, atomic. The learning policy is stored with the rules (``...:rules:meta``) by the first
process; a process with another policy fails at start-up instead of learning differently.
Errors come out as :class:`~dedup_worker.errors.BackendUnavailable` (retry later) or
:class:`~dedup_worker.adapters.redis_client.BackendError`, like every Redis adapter here.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from crawler.rules.book import RuleChange
from crawler.rules.learning import Observation
from crawler.rules.policy import DEFAULT_POLICY, Evidence, RulePolicy, State
from crawler.rules.redis_lua import ADD_SAVED, RECORD, SYNC
from crawler.rules.rewrite import rule_id
from crawler.rules.store import SYNC_LIMIT, RuleStatus, Sync, short_hash
from dedup_worker.adapters.redis_client import (
    BackendError,
    Client,
    check_binary,
    describe,
    translated,
)
from dedup_worker.errors import ConfigError

logger = logging.getLogger(__name__)

_CRAWL_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
#: Observations per script call: bounds the time one call holds the server.
_CALL_OBSERVATIONS = 500
#: Rules per pipeline when listing them all (reports).
_LIST_CHUNK = 1000


def rules_prefix(crawl_id: str) -> str:
    return f"neardup:crawl:{{{crawl_id}}}:rules:"


class RedisRuleStore:
    """``RuleStore`` on Redis. Thread-safe (redis-py clients are)."""

    def __init__(self, client: Client, crawl_id: str, policy: RulePolicy = DEFAULT_POLICY) -> None:
        if not _CRAWL_ID.match(crawl_id):
            raise ConfigError(
                f"NEARDUP_CRAWL_ID {crawl_id!r} cannot name shared rules: "
                f"use 1-200 of A-Z a-z 0-9 _ . : -"
            )
        check_binary(client)
        self.policy = policy
        self.url = describe(client)
        self._client = client
        self.prefix = rules_prefix(crawl_id)
        self._keys = self.prefix + "keys"
        self._record = client.register_script(RECORD)
        self._sync = client.register_script(SYNC)
        self._add_saved = client.register_script(ADD_SAVED)
        self._policy_args = [
            repr(policy.z),
            repr(policy.activate_at),
            str(policy.min_paths),
            str(policy.min_values),
            str(policy.window),
            str(policy.window_failures),
            str(policy.diversity_cap),
        ]
        with translated(self.url):
            self._adopt_policy()

    def _adopt_policy(self) -> None:
        key = self.prefix + "meta"
        mine = json.dumps(self.policy.as_dict(), sort_keys=True)
        self._client.set(key, mine.encode(), nx=True)
        stored: bytes | None = self._client.get(key)  # type: ignore[assignment]
        if stored is None:
            raise BackendError(f"rule policy {key} vanished while opening the store on {self.url}")
        theirs, ours = json.loads(stored), json.loads(mine)
        # A number the stored policy lacks was added to RulePolicy after the crawl began (by
        # an older version): only the numbers both know must agree, so such a crawl resumes.
        if theirs != {name: value for name, value in ours.items() if name in theirs}:
            raise ConfigError(
                f"the crawl's rules at {key} were learned with another policy "
                f"({stored.decode()}); use the same rule settings in every process of the "
                f"crawl, or another NEARDUP_CRAWL_ID"
            )

    def record(self, observations: Sequence[Observation]) -> list[RuleStatus]:
        statuses: list[RuleStatus] = []
        for start in range(0, len(observations), _CALL_OBSERVATIONS):
            chunk = observations[start : start + _CALL_OBSERVATIONS]
            args: list[str] = [self.prefix, *self._policy_args]
            for observation in chunk:
                args.extend(self._observation_args(observation))
            with translated(self.url):
                replies = self._record(keys=[self._keys], args=args)
            for observation, reply in zip(chunk, replies, strict=True):
                statuses.append(_status(observation.rule.key, reply))
        return statuses

    @staticmethod
    def _observation_args(observation: Observation) -> list[str]:
        rule = observation.rule
        needs_values = rule.needs_values
        return [
            rule.id,
            rule.key,
            observation.id,
            "1" if observation.success else "0",
            short_hash(observation.value) if needs_values else "",
            short_hash(observation.path),
            "1" if needs_values else "0",
        ]

    def sync(self, cursor: int, limit: int = SYNC_LIMIT) -> Sync:
        with translated(self.url):
            after, length, reset, entries, flat = self._sync(
                keys=[self._keys], args=[self.prefix, cursor, limit]
            )
        changes = [RuleChange(_text(e[1:]), State(_text(e[:1]))) for e in entries]
        active = {}
        for at in range(0, len(flat), 8):
            status = _status(_text(flat[at]), flat[at + 1 : at + 8])
            active[status.key] = status
        return Sync(changes, int(after), int(length), active, bool(reset))

    def statuses(self) -> dict[str, RuleStatus]:
        with translated(self.url):
            ids = {_text(i): _text(k) for i, k in self._client.hgetall(self._keys).items()}
            found: dict[str, RuleStatus] = {}
            items = list(ids.items())
            for start in range(0, len(items), _LIST_CHUNK):
                chunk = items[start : start + _LIST_CHUNK]
                pipe = self._client.pipeline(transaction=False)
                for rule_id, _ in chunk:
                    pipe.hmget(self.prefix + "s:" + rule_id, "st", "s", "f", "r")
                    pipe.scard(self.prefix + "v:" + rule_id)
                    pipe.scard(self.prefix + "p:" + rule_id)
                    pipe.hget(self.prefix + "s:" + rule_id, "sv")
                replies = pipe.execute()
                for n, (_, key) in enumerate(chunk):
                    (state, s, f, r), values, paths, saved = replies[4 * n : 4 * n + 4]
                    if state is None:
                        continue  # listed but not yet counted (a racing first record)
                    found[key] = _status(key, [state, s, f, r, values, paths, saved])
        return found

    def add_saved(self, counts: Mapping[str, int]) -> None:
        args: list[Any] = [self.prefix]
        for key, count in counts.items():
            if count:
                args.extend([rule_id(key), int(count)])
        if len(args) > 1:
            with translated(self.url):
                self._add_saved(keys=[self._keys], args=args)

    def close(self) -> None:
        pass  # the client belongs to the caller


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _status(key: str, reply: Sequence[Any]) -> RuleStatus:
    state, successes, failures, recent, values, paths, saved = reply
    evidence = Evidence(int(successes), int(failures), int(recent), int(values), int(paths))
    return RuleStatus(key, State(_text(state)), evidence, int(saved or 0))
