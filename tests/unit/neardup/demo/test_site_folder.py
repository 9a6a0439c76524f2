"""``neardup demo --site DIR``: a folder of pages served as hosts, its ground truth and the score
of a crawl (the two numbers a user counts: duplicates fetched, unique pages never fetched)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.rules.rewrite import PathRewrite
from dedup_worker.contract.messages import Decision, Verdict
from dedup_worker.core.text import words
from neardup.cli import main
from neardup.demo.static import FolderSite, SiteFolderError, SiteTruth, StaticSite, site_truth
from neardup.demo.static_score import (
    contained_in_fetched,
    rule_score_lines,
    score_rules,
    score_site,
    site_score_lines,
    text_never_fetched,
)
from neardup.demo.truth import Rendered
from neardup.rules_table import RuleRow

WORDS = [f"w{i}" for i in range(400)]


def text(seed: int, n: int = 60) -> str:
    return " ".join(WORDS[(seed * 7 + i * 13) % len(WORDS)] for i in range(n))


def html(title: str, body: str, links: list[str] = ()) -> str:  # type: ignore[assignment]
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return f"<html><head><title>{title}</title></head><body><p>{body}</p>{anchors}</body></html>"


def write(root: Path, rel: str, content: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    """Two hosts: ``docs`` with releases 1 and 2 (page b changed, a and c alike) and a
    ``mirror`` of release 2; a robots.txt rule, a folder link, a query in a file name."""
    root = tmp_path / "sites"
    pages = {"a": text(1), "b": text(2), "c": text(3)}
    changed = {**pages, "b": text(9)}
    for host, releases in (("docs", {"1": pages, "2": changed}), ("mirror", {"2": changed})):
        links = [f"/{r}/" for r in releases]
        write(
            root, f"{host}/index.html", html(host, "home of " + host, [*links, "/private/x.html"])
        )
        write(root, f"{host}/private/x.html", html("x", text(50)))
        for release, texts in releases.items():
            names = [f"{n}.html" for n in texts]
            write(root, f"{host}/{release}/index.html", html(release, "contents", names))
            for name, body in texts.items():
                write(root, f"{host}/{release}/{name}.html", html(name, body, ["index.html"]))
    (root / "docs" / "robots.txt").write_text("User-agent: *\nDisallow: /private/\n")
    write(root, "docs/1/list.html?page=2", html("page 2", text(40)))
    return root


def test_requests_find_files_folders_redirect_and_queries_are_file_names(folder: Path) -> None:
    site = StaticSite(folder)
    assert site.hosts == ("docs", "mirror")
    assert site.addresses() == {"docs": "127.0.1.1", "mirror": "127.0.1.2"}
    base = {"docs": "http://127.0.1.1:80", "mirror": "http://127.0.1.2:80"}
    status, headers, body = site.respond("docs", "/1/a.html", base)
    assert status == 200 and headers["Content-Type"] == "text/html" and b"<title>a" in body
    assert site.respond("docs", "/1/", base)[0] == 200  # index.html
    assert site.respond("docs", "/1", base)[:2] == (301, {"Location": base["docs"] + "/1/"})
    status, headers, body = site.respond("docs", "/1/list.html?page=2", base)
    assert b"page 2" in body and headers["Content-Type"] == "text/html"  # wget's spelling
    assert site.respond("docs", "/1/a.html?utm=x", base)[0] == 200  # query ignored if no file
    assert site.respond("docs", "/nothing.html", base)[0] == 404
    assert site.respond("docs", "/../mirror/index.html", base)[0] == 404  # never outside
    assert site.respond("mirror", "/robots.txt", base)[2].startswith(b"User-agent: *\nAllow")


def test_a_folder_without_hosts_or_home_pages_is_refused_with_what_it_should_hold(
    tmp_path: Path,
) -> None:
    with pytest.raises(SiteFolderError, match="not a folder"):
        StaticSite(tmp_path / "missing")
    with pytest.raises(SiteFolderError, match="one folder per host"):
        StaticSite(tmp_path)
    (tmp_path / "example.org").mkdir()
    with pytest.raises(SiteFolderError, match=r"have no index\.html: example\.org"):
        StaticSite(tmp_path)


def test_the_truth_is_what_a_crawl_of_every_link_fetches_and_which_pages_resemble(
    folder: Path,
) -> None:
    site = StaticSite(folder)
    base = {"docs": "http://127.0.1.1:8000", "mirror": "http://127.0.1.2:8000"}
    truth = site_truth(site, base)
    docs, mirror = base["docs"], base["mirror"]
    assert truth.seeds == (docs + "/", mirror + "/")
    assert docs + "/private/x.html" not in truth.pages  # robots.txt
    assert mirror + "/private/x.html" in truth.pages  # no robots.txt there
    assert docs + "/1/list.html?page=2" not in truth.pages  # nothing links to it
    # homes, the mirror's private page, three releases of /r/, /r/index.html and three pages
    assert len(truth.pages) == 2 + 1 + 3 * 5
    # Release 2's a and c are release 1's; its b is new; the mirror copies release 2.
    assert truth.partners[docs + "/2/a.html"] == {docs + "/1/a.html", mirror + "/2/a.html"}
    assert truth.partners[docs + "/2/b.html"] == {mirror + "/2/b.html"}
    assert docs + "/1/b.html" not in truth.partners
    # The folder's own URL and index.html are one page twice (exact duplicates).
    assert docs + "/2/index.html" in truth.partners[docs + "/2/"]
    assert {truth.host[url] for url in truth.pages} == {"docs", "mirror"}


def _decision(url: str, of: str | None = None) -> Decision:
    return Decision(
        url=url, host="h", fetched_at=0.0, decided_at=0.0,
        verdict=Verdict.UNIQUE if of is None else Verdict.NEAR_DUPLICATE, simhash="0" * 16,
        priority=0.5, follow_outlinks=of is None, duplicate_of=of,
    )  # fmt: skip


def test_a_crawl_is_scored_by_duplicates_fetched_and_unique_pages_never_fetched(
    folder: Path,
) -> None:
    base = {"docs": "http://127.0.1.1:8000", "mirror": "http://127.0.1.2:8000"}
    truth = site_truth(StaticSite(folder), base)
    docs, mirror = base["docs"], base["mirror"]
    # Fetched every page but the mirror's release and docs' 2/b.html, and docs' 2/a twice.
    log = [url for url in truth.pages if not url.startswith(mirror + "/2/")]
    log = [url for url in log if url != docs + "/2/b.html"] + [docs + "/2/a.html"]
    decisions = {url: _decision(url) for url in log}
    decisions[docs + "/2/a.html"] = _decision(docs + "/2/a.html", docs + "/1/a.html")
    decisions[docs + "/2/c.html"] = _decision(docs + "/2/c.html", docs + "/1/b.html")  # wrong
    score = score_site(truth, log, decisions)
    assert score.full_fetches == len(truth.pages)
    # Release 2's b is on no page fetched: its two copies are lost.
    assert score.lost == (docs + "/2/b.html", mirror + "/2/b.html")
    assert score.wrong == (docs + "/2/c.html",)
    # How much of 2/c's text the page it was taken for (1/b) holds, counted by hand.
    c_text = set(_shingles(truth.rendered[docs + "/2/c.html"].text))
    b_text = set(_shingles(truth.rendered[docs + "/1/b.html"].text))
    assert score.wrong_contained == (round(len(c_text & b_text) / len(c_text), 3),)
    # /1/index.html (/1/ again), /2/ (its contents read as /1/'s), /2/index.html, 2/a and
    # 2/c (release 1's), 2/a fetched twice
    assert score.duplicates_fetched == 6
    assert score.saved == score.full_fetches - len(log)
    by_host = {h.host: h for h in score.hosts}
    assert by_host["mirror"].fetched == 2 and by_host["mirror"].unique_missed == 1
    assert by_host["docs"].unique_missed == 1
    # The two copies of release 2's b resemble what was fetched alike, and below 0.9.
    nearest = score.lost_nearest
    assert len(nearest) == 2 and nearest[0] == nearest[1] and 0.0 < nearest[0] < 0.9
    # Some of their text is on pages fetched (the template), not all: that text is missed.
    contained = score.lost_contained
    assert len(contained) == 2 and contained[0] == contained[1] and 0.0 < contained[0] < 1.0
    missed = set(_shingles(truth.rendered[docs + "/2/b.html"].text))
    for url in set(log):
        missed -= set(_shingles(truth.rendered[url].text))
    everything = {s for url in truth.pages for s in _shingles(truth.rendered[url].text)}
    assert missed and (score.text_missed, score.text_total) == (len(missed), len(everything))
    assert score.text_missed_on_lost == len(missed)  # nothing else was left unfetched
    lines = "\n".join(site_score_lines(score))
    assert "text never fetched:" in lines and f"({len(missed)} of {len(everything)})" in lines
    assert "a page fetched holds" in lines
    assert "of their match: 1 (the match holds" in lines
    assert "unique pages never fetched: 2 (coverage" in lines
    assert "each resembles a page fetched at J" in lines
    assert "duplicates fetched:         6" in lines
    assert score.as_dict()["unique_missed"] == 2
    # Breadth-first, every link, stopped after as many fetches as a crawl made (a page
    # fetched twice included): the pages after that point of the truth's order, but for
    # those with a partner before it. As many fetches as this crawl made reach every
    # content that way (only copies come last); three fetches do not.
    for fetches in (log, truth.pages[:3]):
        before = set(truth.pages[: len(fetches)])
        unreached = [
            url
            for url in truth.pages
            if url not in before and not truth.partners.get(url, set()) & before
        ]
        scored = score_site(truth, fetches, decisions)
        assert scored.breadth_first_lost == len(unreached)
        text = "\n".join(site_score_lines(scored))
        assert f"stopped after as many fetches: {len(unreached)} (coverage" in text
    assert score.breadth_first_lost == 0 and scored.breadth_first_lost > 0
    assert "fetches saved" in lines and "with a budget" not in lines
    budgeted = "\n".join(site_score_lines(score_site(truth, truth.pages[:3], decisions, 3)))
    assert f"fetched 3 pages with a budget of 3 ({len(truth.pages) - 3} of the site's" in budgeted
    assert "fetches saved" not in budgeted


def test_text_never_fetched_tells_a_lost_page_from_a_skipped_copys_few_words() -> None:
    words_ = [f"w{i}" for i in range(60)]
    texts = {
        "http://h/a": " ".join(words_),  # fetched
        "http://h/b": " ".join([*words_, "tail"]),  # a copy of a, skipped: 1 new shingle
        "http://h/c": " ".join(words_[:30] + [f"x{i}" for i in range(30)]),  # lost
    }
    truth = SiteTruth(
        base={"h": "http://h"}, seeds=("http://h/a",), pages=tuple(texts),
        host=dict.fromkeys(texts, "h"),
        rendered={u: Rendered(("h", u[8:]), u, t, ()) for u, t in texts.items()},
        partners={}, page_bytes=1,
    )  # fmt: skip
    missed = text_never_fetched(truth, ["http://h/a"], ["http://h/c"])
    # c: 27 shingles of x words and the 3 across the seam; b: its one shingle with "tail".
    assert (missed.text_missed, missed.text_missed_on_lost) == (31, 30)
    assert missed.text_total == 57 + 31
    # c's first 27 shingles are a's: 27 of its 57.
    assert contained_in_fetched(truth, ["http://h/c"], ["http://h/a"]) == (round(27 / 57, 3),)


def _shingles(text: str) -> list[tuple[str, ...]]:
    """Word 4-shingles as the reference takes them (its own tokens: ``words``)."""
    tokens = words(text)
    return [tuple(tokens[i : i + 4]) for i in range(max(len(tokens) - 3, 1))]


def test_the_folder_is_served_on_its_own_loopback_addresses(folder: Path) -> None:
    import urllib.request

    with FolderSite(folder) as site:
        home = urllib.request.urlopen(site.seeds()[0], timeout=10).read()
        assert b"home of docs" in home
        assert site.fetched() == [site.seeds()[0]]
        assert site.addresses() == ("127.0.1.1", "127.0.1.2")


def test_the_command_refuses_a_site_folder_it_cannot_crawl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--site", str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    assert "no host folders" in capsys.readouterr().err


def _rule(src: str, dst: str, state: str) -> RuleRow:
    (src_origin, src_prefix), (dst_origin, dst_prefix) = (src.split("|"), dst.split("|"))
    key = PathRewrite(src_origin, src_prefix, dst_origin, dst_prefix).key
    return RuleRow(key, "prefix", state, 10, 10, 1.0, 0.8, 0)


def test_the_crawls_rules_are_scored_by_the_pairs_they_map(folder: Path) -> None:
    base = {"docs": "http://127.0.1.1:8000", "mirror": "http://127.0.1.2:8000"}
    truth = site_truth(StaticSite(folder), base)
    docs, mirror = base["docs"], base["mirror"]
    rules = [
        _rule(f"{docs}|/1", f"{docs}|/2", "active"),  # b changed between the releases
        _rule(f"{docs}|/2", f"{mirror}|/2", "dropped"),  # the mirror copies release 2 whole
        _rule(f"{docs}|/1", f"{mirror}|/2", "candidate"),  # predicted nothing: not scored
        _rule(f"{docs}|/9", f"{docs}|/2", "active"),  # maps no page of the site
    ]
    scores = score_rules(truth, rules)
    assert [(s.state, s.pairs, s.alike, s.holds) for s in scores] == [
        ("active", 5, 4, False),  # /1/, /1/index.html, a, b, c: all but b alike
        ("dropped", 5, 5, True),
    ]
    lines = "\n".join(rule_score_lines(scores))
    assert "1 active, 0 of them alike on every page pair they map; 1 dropped, 1 of them" in lines
    assert f"active, 4 of 5 pairs alike: prefix {docs}/1 {docs}/2" in lines
    assert f"dropped, all 5 pairs alike: prefix {docs}/2 {mirror}/2" in lines
