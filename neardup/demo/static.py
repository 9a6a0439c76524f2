"""A folder of real pages served as sites, and its ground truth: ``neardup demo --site DIR``.

``DIR`` holds one folder per host, as ``wget --mirror`` writes a crawl (``DIR/<host>/<path>``)
and as ``tools/build_corpus.py --sites`` writes its documentation sites: ``GET /a/b.html`` on
host ``h`` serves ``DIR/h/a/b.html``, a path ending in ``/`` serves its ``index.html``, a path
naming a folder redirects to the path with ``/`` (as web servers do), and a query string is part
of the file name when such a file exists (``page.html?id=3``, wget's spelling), else ignored.
Every host is served on a loopback address of its own (127.0.1.1, 127.0.1.2, ... in the
folders' order), and a crawl starts from every host's ``/``.

The truth is computed, not planted: every page a crawl following every link would fetch from
those seeds (robots.txt obeyed, redirects followed, other hosts out of scope) is extracted as
the spider extracts it, and two pages are partners iff the Jaccard resemblance of their word
4-shingle sets is >= 0.9 (the detector's reference relation). A crawl is then scored
(:mod:`neardup.demo.static_score`) by what a user of a real crawl would count: the duplicates
it fetched and the unique pages it never fetched.
"""

from __future__ import annotations

import mimetypes
import posixpath
import urllib.robotparser
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Self
from urllib.parse import unquote, urlsplit

from crawler.extract import extract
from crawler.urls import canonicalize_url
from neardup.demo.planted import NOT_FOUND
from neardup.demo.server import Response, SiteServer
from neardup.demo.truth import Rendered, jaccard_partners
from neardup.errors import NeardupError

#: Hosts get 127.0.1.1, 127.0.1.2, ...: clear of the demo's 127.0.0.2-6.
FIRST_ADDRESS = (127, 0, 1, 1)
MAX_HOSTS = 254
HTML_SUFFIXES = frozenset({"", ".html", ".htm", ".xhtml", ".shtml", ".php", ".asp", ".aspx"})


class SiteFolderError(NeardupError):
    """``--site`` names no usable folder of hosts; the message says what it should hold."""


@dataclass(frozen=True)
class Found:
    """What a request finds: a file (``path``) or a redirect (``location``, a path)."""

    path: Path | None = None
    location: str | None = None

    @property
    def html(self) -> bool:
        if self.path is None:
            return False
        # wget names a page with a query ``list.html?page=2``: the suffix is before the query.
        name = self.path.name.partition("?")[0]
        return PurePosixPath(name).suffix.lower() in HTML_SUFFIXES


class StaticSite:
    """The pages under ``root``, one folder per host (:class:`~neardup.demo.server.Content`)."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise SiteFolderError(f"--site {root}: not a folder (want one folder per host)")
        self.root = root.resolve()
        self._hosts = tuple(sorted(p.name for p in self.root.iterdir() if p.is_dir()))
        if not self._hosts:
            raise SiteFolderError(
                f"--site {root}: no host folders in it; it should hold one folder per host "
                "(DIR/example.org/index.html, ...), as `wget --mirror` writes them"
            )
        if len(self._hosts) > MAX_HOSTS:
            raise SiteFolderError(f"--site {root}: {len(self._hosts)} hosts, at most {MAX_HOSTS}")
        missing = [h for h in self._hosts if not (self.root / h / "index.html").is_file()]
        if missing:
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise SiteFolderError(
                f"--site {root}: the crawl starts at every host's /, and these host folders "
                f"have no index.html: {', '.join(missing[:5])}{more}"
            )

    @property
    def hosts(self) -> tuple[str, ...]:
        return self._hosts

    def addresses(self) -> dict[str, str]:
        """Each host's loopback address."""
        a, b, c, d = FIRST_ADDRESS
        return {
            host: f"{a}.{b}.{c + (d + i) // 256}.{(d + i) % 256}"
            for i, host in enumerate(self._hosts)
        }

    def find(self, host: str, path: str) -> Found | None:
        """The file (or folder redirect) a request for ``path`` (with its query) finds."""
        split = urlsplit(path)
        rel = posixpath.normpath(unquote(split.path)).lstrip("/")
        if rel in (".", ""):
            rel = ""
        folder = self.root / host
        names = [f"{rel}?{unquote(split.query)}", rel] if split.query else [rel]
        for name in names:
            target = (folder / name) if name else folder
            if not _inside(target, folder):
                return None
            if target.is_dir():
                if split.path.endswith("/") or not name:
                    index = target / "index.html"
                    return Found(path=index) if index.is_file() else None
                return Found(location=split.path + "/" + (f"?{split.query}" if split.query else ""))
            if target.is_file():
                return Found(path=target)
        return None

    def respond(self, host: str, path: str, base: dict[str, str]) -> Response:
        found = self.find(host, path)
        if found is None:
            if path == "/robots.txt":
                return 200, {"Content-Type": "text/plain"}, b"User-agent: *\nAllow: /\n"
            return 404, {"Content-Type": "text/html"}, NOT_FOUND
        if found.location is not None:
            return 301, {"Location": base[host] + found.location}, b""
        assert found.path is not None
        return 200, {"Content-Type": _content_type(found)}, found.path.read_bytes()

    def robots(self, host: str) -> urllib.robotparser.RobotFileParser:
        parser = urllib.robotparser.RobotFileParser()
        robots = self.root / host / "robots.txt"
        parser.parse(robots.read_text(errors="replace").splitlines() if robots.is_file() else [])
        return parser


def _inside(target: Path, folder: Path) -> bool:
    try:
        target.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def _content_type(found: Found) -> str:
    if found.html:
        return "text/html"
    assert found.path is not None
    guessed, _ = mimetypes.guess_type(found.path.name)
    return guessed or "application/octet-stream"


@dataclass(frozen=True)
class SiteTruth:
    """What a crawl of the folder is scored against (canonical URLs)."""

    base: Mapping[str, str]
    seeds: tuple[str, ...]
    #: Every page a crawl following every link fetches, breadth-first from the seeds.
    pages: tuple[str, ...]
    #: Each page's host (its folder).
    host: Mapping[str, str]
    #: Each page as the spider extracts it (text, outlinks).
    rendered: Mapping[str, Rendered]
    partners: Mapping[str, frozenset[str]]
    #: Mean size of a page, in bytes.
    page_bytes: int


def site_truth(site: StaticSite, base: Mapping[str, str]) -> SiteTruth:
    """Explore the site from every host's ``/`` as a crawler following every link would."""
    hosts = {urlsplit(url).netloc: host for host, url in base.items()}
    robots = {host: site.robots(host) for host in site.hosts}
    seeds = tuple(canonicalize_url(base[host] + "/") for host in site.hosts)
    rendered: dict[str, Rendered] = {}
    host_of: dict[str, str] = {}
    sizes: list[int] = []
    seen = set(seeds)
    queue = deque(seeds)
    while queue:
        url = queue.popleft()
        parts = urlsplit(url)
        host = hosts.get(parts.netloc)
        if host is None or not robots[host].can_fetch("*", url):
            continue
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        found = site.find(host, target)
        if found is not None and found.location is not None:
            queue.extend(_unseen([canonicalize_url(base[host] + found.location)], seen))
            continue
        if found is None or not found.html:
            continue
        assert found.path is not None
        body = found.path.read_bytes()
        extracted = extract(body, url)
        rendered[url] = Rendered((host, target), url, extracted.text, extracted.outlinks)
        host_of[url] = host
        sizes.append(len(body))
        queue.extend(_unseen(extracted.outlinks, seen))
    texts = {url: page.text for url, page in rendered.items()}
    return SiteTruth(
        base=dict(base),
        seeds=seeds,
        pages=tuple(rendered),
        host=host_of,
        rendered=rendered,
        partners=jaccard_partners(texts),
        page_bytes=sum(sizes) // max(len(sizes), 1),
    )


def _unseen(urls: Iterable[str], seen: set[str]) -> list[str]:
    fresh = [u for u in dict.fromkeys(urls) if u not in seen]
    seen.update(fresh)
    return fresh


class FolderSite:
    """The folder's hosts, served: ``with FolderSite(root) as site: ...``."""

    def __init__(self, root: Path) -> None:
        self.content = StaticSite(root)
        self.server = SiteServer(self.content, self.content.addresses())

    def start(self) -> Self:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def base(self) -> dict[str, str]:
        return dict(self.server.base)

    def seeds(self) -> tuple[str, ...]:
        return tuple(canonicalize_url(self.base[host] + "/") for host in self.content.hosts)

    def addresses(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.content.addresses().values())))

    def truth(self) -> SiteTruth:
        return site_truth(self.content, self.base)

    def fetched(self) -> list[str]:
        """HTML pages served (status 200), in the order the hosts received them."""
        log = []
        for hit in list(self.server.log):
            found = self.content.find(hit.host, hit.path) if hit.status == 200 else None
            if found is not None and found.html:
                log.append(self.server.url(hit.host, hit.path))
        return log
