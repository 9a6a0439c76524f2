"""A recrawl of a folder of real sites against the index of a first crawl, with pages edited in
between: what the second crawl fetches, what it decides, and what it misses.

Run from the repository root with a stack of your own (a recrawl needs the first crawl's Redis;
``neardup demo`` always starts a fresh one)::

    neardup up --state-dir /tmp/rc-stack > /tmp/rc-stack.env &    # or your own Kafka and Redis
    sleep 5; eval "$(grep ^export /tmp/rc-stack.env)"
    python benchmarks/bench_recrawl.py --site DIR --out /tmp/recrawl [--edits 30]

``DIR`` is copied first (the edits go to the copy). Crawl 1 and crawl 2 run as ``neardup crawl``
does, under the crawl ids ``recrawl-1`` and ``recrawl-2``. Between them, ``--edits`` pages that
crawl 1 decided unique, at path depth >= 3, get the words of each plain paragraph shuffled. An
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
from neardup.demo.static import FolderSite
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


def score_line(name: str, score: SiteScore) -> str:
    nearest = ", ".join(f"{j:.2f}" for j in score.lost_nearest)
    return (
        f"{name}: fetched {score.fetched}, duplicates fetched {score.duplicates_fetched}, "
        f"unique missed {len(score.lost)} (nearest fetched J {nearest or '-'}), "
        f"coverage {score.coverage:.4f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--edits", type=int, default=30)
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
        edited = edit(site, rng.sample(deep, min(args.edits, len(deep))), rng)
        truth2 = site.truth()
        second = crawl(site, args.out, "recrawl-2")
        log2 = site.fetched()[len(log1) :]
    again = set(log2)
    print(score_line("crawl 1", score_site(truth, log1, first)))
    print("  verdicts:", dict(Counter(d.verdict.value for d in first.values())))
    print(score_line("crawl 2", score_site(truth2, log2, second)))
    print("  verdicts:", dict(Counter(d.verdict.value for d in second.values())))
    refetched = sum(url in again for url in unique)
    print(f"  crawl 1's unique pages fetched again: {refetched} of {len(unique)}")
    outcomes = Counter(second[u].verdict.value if u in second else "not fetched" for u in edited)
    print(f"  pages edited between the crawls: {len(edited)}, decided {dict(outcomes)}")
    (args.out / "recrawl.json").write_text(
        json.dumps({"edited": edited, "outcomes": outcomes}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
