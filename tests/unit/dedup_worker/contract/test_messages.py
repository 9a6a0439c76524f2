"""The message contract: round trips and one clear reason per kind of bad input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dedup_worker.contract.messages import (
    Decision,
    Page,
    Verdict,
    decode_decision,
    decode_page,
)
from dedup_worker.errors import ContractError

GOOD = {
    "schema": "neardup.page/1",
    "url": "https://a.example/x",
    "host": "a.example",
    "fetched_at": 1.5,
    "text": "hello world",
}


def raw(**changes: object) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


@given(
    text=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")),
    links=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)),
)
def test_page_round_trip(text: str, links: list[str]) -> None:
    page = Page(url="https://a.example/é", host="a.example", fetched_at=2.0, text=text,
                outlinks=tuple(links), title="T", depth=3)  # fmt: skip
    back = decode_page(page.to_json())
    assert back.text == text and back.outlinks == tuple(links) and back.title == "T"
    assert back.requested_url == page.url and back.depth == 3 and back.fetched_at == 2.0


def test_decision_round_trip() -> None:
    decision = Decision(
        url="https://b.example/", host="b.example", verdict=Verdict.NEAR_DUPLICATE,
        simhash="00ff" * 4, priority=0.0, follow_outlinks=False, fetched_at=1.0,
        decided_at=2.0, duplicate_of="https://a.example/", distance=2,
        evidence={"k": 3}, corrects=True,
    )  # fmt: skip
    assert decode_decision(decision.to_json()) == decision


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "malformed_json"),
        (b"[" * 100_000, "malformed_json"),
        (b"\xff\xfe garbage", "invalid_utf8"),
        (b"[1, 2]", "wrong_type"),
        (raw(text=5), "wrong_type"),
        (raw(status=True), "wrong_type"),
        (raw(fetched_at=float("nan")).replace(b"NaN", b"1e999"), "wrong_type"),
        (raw(outlinks=["ok", 3]), "wrong_type"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "url"}).encode(), "missing_field"),
        (raw(schema="neardup.page/2"), "unknown_schema_version"),
        (raw(schema="other.thing/1"), "unknown_schema"),
        (raw(schema=None), "missing_schema"),
        (raw(text="a\u0000b"), "binary_body"),
        (raw(url="https://a.example/\ud800"), "invalid_unicode"),
        (raw(outlinks=["https://a.example/\udfff"]), "invalid_unicode"),
    ],
)
def test_bad_pages_have_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(ContractError) as caught:
        decode_page(payload)
    assert caught.value.reason == reason


def test_too_large_text() -> None:
    with pytest.raises(ContractError) as caught:
        decode_page(raw(text="x" * 2000), max_text_bytes=1000)
    assert caught.value.reason == "too_large"


@pytest.mark.parametrize(
    ("text", "limit", "refused"),
    [
        ("é" * 500, 1000, False),  # 1,000 bytes of UTF-8, spelled \u00e9 in a 3 KB message
        ("é" * 501, 1000, True),
        ("\n" * 1000, 1000, False),  # escapes make the message twice the text
        ("\n" * 1001, 1000, True),
        ("ü" * 300 + "x" * 400, 1000, False),  # raw UTF-8 (ensure_ascii off): 1,000 bytes
        ("ü" * 300 + "x" * 401, 1000, True),
    ],
)
def test_the_text_limit_counts_the_texts_utf8_not_its_json(
    text: str, limit: int, refused: bool
) -> None:
    body = json.dumps({**GOOD, "text": text}, ensure_ascii="ü" not in text).encode()
    if refused:
        with pytest.raises(ContractError) as caught:
            decode_page(body, max_text_bytes=limit)
        assert caught.value.reason == "too_large"
    else:
        assert decode_page(body, max_text_bytes=limit).text == text


def test_minor_versions_and_extra_fields_are_accepted() -> None:
    page = decode_page(raw(schema="neardup.page/1.7", brand_new_field=[1, 2]))
    assert page.url == GOOD["url"] and page.requested_url == GOOD["url"]


@given(
    url=st.text(min_size=1, max_size=40).filter(
        lambda u: u.encode("utf-8", "ignore") == u.encode("utf-8", "surrogatepass")
    ),
    priority=st.floats(min_value=0, max_value=1),
    fetched_at=st.floats(min_value=0, max_value=1e12),
    distance=st.none() | st.integers(min_value=0, max_value=64),
)
def test_decisions_encode_as_compact_stdlib_json(
    url: str, priority: float, fetched_at: float, distance: int | None
) -> None:
    """orjson's output is compact JSON the stdlib reads back to the same values, floats exact
    (it spells some floats differently, 1e-7 for 1e-07: the same number)."""
    decision = Decision(
        url=url, host="h", verdict=Verdict.UNIQUE, simhash="0" * 16, priority=priority,
        follow_outlinks=True, fetched_at=fetched_at, decided_at=fetched_at + 0.5,
        duplicate_of=None, distance=distance, outlinks=(url, "https://é.example/ü"),
        corrects=False, evidence={"rule": "r", "nearest": distance, "novelty": priority},
    )  # fmt: skip
    raw = decision.to_json()
    body = json.loads(raw.decode("utf-8"))
    assert (body["priority"], body["fetched_at"], body["url"]) == (priority, fetched_at, url)
    assert len(raw) <= len(json.dumps(body, ensure_ascii=False).encode())  # compact
    assert decode_decision(raw) == decision


def test_malformed_input_keeps_its_precise_reason_after_the_fast_parser() -> None:
    """orjson rejects these; the stdlib parser behind it names the reason (or accepts)."""
    with pytest.raises(ContractError) as surrogate:
        decode_page(b'{"schema": "neardup.page/1", "url": "\\ud800", "host": "h", '
                    b'"fetched_at": 1, "text": "t"}')  # fmt: skip
    assert surrogate.value.reason == "invalid_unicode"
    with pytest.raises(ContractError) as bad_utf8:
        decode_page(b'{"text": "\xff"}')
    assert bad_utf8.value.reason == "invalid_utf8"
    with pytest.raises(ContractError) as nested:
        decode_page(b"[" * 5000 + b"]" * 5000)
    assert nested.value.reason == "malformed_json"
