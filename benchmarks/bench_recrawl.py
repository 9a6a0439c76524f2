"""A recrawl of a folder of real sites against the index of a first crawl, with pages edited in
between: what the second crawl fetches, what it decides, and what it misses.

Run from the repository root with a stack of your own (a recrawl needs the first crawl's Redis;
``neardup demo`` always starts a fresh one)::

    neardup up --state-dir /tmp/rc-stack > /tmp/rc-stack.env &    # or your own Kafka and Redis
    sleep 5; eval "$(grep ^export /tmp/rc-stack.env)"
    python benchmarks/bench_recrawl.py --site DIR --out /tmp/recrawl [--edits 30] [--keepers 15]

``DIR`` is copied first (the edits go to the copy). Crawl 1 and crawl 2 run as ``neardup crawl``
does, under the crawl ids ``recrawl-1`` and ``recrawl-2``. Between them, ``--edits`` pages that
crawl 1 decided unique, at path depth >= 3, get the words of each plain paragraph shuffled, and
so do ``--keepers`` unique pages that have a resembling page crawl 1 did not fetch (the hard
case: their old text then lives only on copies the recrawl has reasons to skip). An
edit that leaves the page's text within the threshold (one short paragraph of a long page)
rightly comes back ``unchanged``. Each crawl is scored against the folder's own resemblance as
it stood then (``neardup.demo.static_score``): fetched, duplicates fetched, unique pages missed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
from collections import Counter
from pathlib import Path

from dedup_worker.contract import decode_decision
from dedup_worker.contract.messages import Decision
from dedup_worker.contract.reading import fold_decisions
from neardup.crawl_run import CrawlOptions, CrawlRun
from neardup.demo.static import FolderSite, SiteTruth
from neardup.demo.static_score import SiteScore, score_site

_PARAGRAPH = re.compile(r"(<p[^>]*>)([^<]{40,})(</p>)")


def crawl(site: FolderSite, out: Path, crawl_id: str) -> dict[str, Decision]:
    """One crawl of the served folder on the environment's Kafka and Redis; each page's
    standing decision by URL."""
    decisions = out / f"{crawl_id}.jsonl"
    options = CrawlOptions(
        seeds=site.seeds(), out=decisions, allowed_domains=site.addresses(),
        state_dir=out / f"state-{crawl_id}", crawl_id=crawl_id, progress=False,
    )  # fmt: skip
    if CrawlRun(options).run() != 0:
        raise SystemExit(f"{crawl_id} failed: see {out / f'state-{crawl_id}'}")
    with decisions.open("rb") as lines:
        final = fold_decisions(decode_decision(line) for line in lines if line.strip())
    return {key.url: decision for key, decision in final.items()}


def edit(site: FolderSite, urls: list[str], rng: random.Random) -> list[str]:
    """Shuffle the words of every plain paragraph of each page; the pages whose file changed."""
    hosts = {base: host for host, base in site.base.items()}
    edited = []
    for url in urls:
        base = next(b for b in hosts if url.startswith(b + "/"))
        found = site.content.find(hosts[base], url[len(base) :])
        if found is None or found.path is None or not found.html:
            continue
        html = found.path.read_text(errors="replace")
        new = _PARAGRAPH.sub(
            lambda m: m[1] + " ".join(rng.sample(m[2].split(), len(m[2].split()))) + m[3], html
        )
        if new != html:
            found.path.write_text(new)
            edited.append(url)
    return edited


def keepers_of_unfetched(truth: SiteTruth, unique: list[str], fetched: set[str]) -> list[str]:
    """Pages crawl 1 decided unique that have a resembling page it did not fetch (a copy a URL
    rule skipped, or one under a duplicate page whose outlinks were not followed): edited,
    each leaves its old text only on copies the recrawl has reasons to skip."""
    return [url for url in unique if any(p not in fetched for p in truth.partners.get(url, ()))]


def text_missed(score: SiteScore) -> list[int]:
    return [score.text_missed, score.text_total, score.text_missed_on_lost]


def score_line(name: str, score: SiteScore) -> str:
    nearest = ", ".join(f"{j:.2f}" for j in score.lost_nearest)
    held = ", ".join(f"{c:.2f}" for c in score.lost_contained)
    return (
        f"{name}: fetched {score.fetched}, duplicates fetched {score.duplicates_fetched}, "
        f"unique missed {len(score.lost)} (nearest fetched J {nearest or '-'}; share of the "
        f"text a fetched page holds {held or '-'}), coverage {score.coverage:.4f}, text never "
        f"fetched {score.text_missed:,} of {score.text_total:,} shingles "
        f"({score.text_missed_share:.3%}; {score.text_missed_on_lost:,} on the pages missed)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--edits", type=int, default=30, help="unique pages edited")
    parser.add_argument(
        "--keepers", type=int, default=15,
        help="more edits, of unique pages with a resembling page crawl 1 did not fetch",
    )  # fmt: skip
    args = parser.parse_args()
    copy = args.out / "site"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(args.site, copy)
    with FolderSite(copy) as site:
        truth = site.truth()
        first = crawl(site, args.out, "recrawl-1")
        log1 = site.fetched()
        unique = sorted(url for url, d in first.items() if d.verdict.value == "unique")
        rng = random.Random(7)
        deep = [url for url in unique if url.count("/") >= 5]
        keepers = keepers_of_unfetched(truth, unique, set(log1))
        picked = rng.sample(keepers, min(args.keepers, len(keepers)))
        others = [url for url in deep if url not in set(picked)]
        picked += rng.sample(others, min(args.edits, len(others)))
        edited = edit(site, picked, rng)
        truth2 = site.truth()
        second = crawl(site, args.out, "recrawl-2")
        log2 = site.fetched()[len(log1) :]
    again = set(log2)
    score1 = score_site(truth, log1, first)
    print(score_line("crawl 1", score1))
    print("  verdicts:", dict(Counter(d.verdict.value for d in first.values())))
    score2 = score_site(truth2, log2, second)
    print(score_line("crawl 2", score2))
    print("  verdicts:", dict(Counter(d.verdict.value for d in second.values())))
    refetched = sum(url in again for url in unique)
    print(f"  crawl 1's unique pages fetched again: {refetched} of {len(unique)}")
    outcomes = Counter(second[u].verdict.value if u in second else "not fetched" for u in edited)
    print(f"  pages edited between the crawls: {len(edited)}, decided {dict(outcomes)}")
    copies = sorted(
        {p for url in set(edited) & set(keepers) for p in truth.partners[url]} - set(log1)
    )
    lost = set(score2.lost)
    print(
        f"  copies of the edited keepers that crawl 1 did not fetch: {len(copies)}; crawl 2 "
        f"fetched {sum(url in again for url in copies)}, missed as unique {len(lost & set(copies))}"
    )
    (args.out / "recrawl.json").write_text(
        json.dumps(
            {
                "edited": edited,
                "outcomes": outcomes,
                "copies": copies,
                "lost_1": score1.lost,
                "lost_2": score2.lost,
                "lost_contained_1": score1.lost_contained,
                "lost_contained_2": score2.lost_contained,
                # distinct word 4-shingles: on no page fetched, of all, of the missed on lost pages
                "text_missed_1": text_missed(score1),
                "text_missed_2": text_missed(score2),
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
