"""``neardup up`` starts real servers and stops them on Ctrl-C; ``neardup decisions`` tails."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import redis

from dedup_worker.adapters.kafka import KafkaSettings, produce_all
from dedup_worker.contract.messages import Decision, Verdict
from neardup.cli import main


def _read_exports(proc: subprocess.Popen[str], timeout: float = 30.0) -> dict[str, str]:
    found: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while len(found) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("export "):
            key, _, value = line[len("export ") :].strip().partition("=")
            found[key] = value
    return found


def test_up_serves_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    exe = shutil.which("neardup", path=str(Path(sys.executable).parent))
    assert exe
    proc = subprocess.Popen(
        [exe, "up", "--state-dir", str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        env = _read_exports(proc)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2, "broker and redis-server run as children"
        assert redis.Redis.from_url(env["NEARDUP_REDIS_URL"]).ping()
        settings = KafkaSettings(env["NEARDUP_KAFKA_BOOTSTRAP"])
        assert produce_all(settings, "smoke", [(None, b"x")]) == 1
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.pid for p in alive]}"


def test_decisions_tail(
    kafka_broker: object, kafka_topic: object, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = kafka_topic(partitions=1)  # type: ignore[operator]
    bootstrap = kafka_broker.bootstrap  # type: ignore[attr-defined]
    decision = Decision(
        url="http://b.test/", host="b.test", verdict=Verdict.NEAR_DUPLICATE, simhash="0" * 16,
        priority=0.0, follow_outlinks=False, fetched_at=1.0, decided_at=2.0,
        duplicate_of="http://a.test/", distance=2,
    )  # fmt: skip
    produce_all(KafkaSettings(bootstrap), topic, [(None, decision.to_json()), (None, b"{not json")])
    argv = ["decisions", "--bootstrap", bootstrap, "--topic", topic, "--from-beginning"]
    assert main([*argv, "--max", "2", "--idle-timeout", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("near_duplicate") and "~ http://a.test/ (d=2)" in lines[0]
    assert lines[1].startswith("!! undecodable decision")


def test_decisions_without_bootstrap_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    os.environ.pop("NEARDUP_KAFKA_BOOTSTRAP", None)
    assert main(["decisions", "--bootstrap", ""]) == 2
    assert "NEARDUP_KAFKA_BOOTSTRAP" in capsys.readouterr().err
