"""Site templates: the chrome a documentation host wraps around a rendered body.

Each template is modelled on a common documentation theme (Docusaurus, a GitHub Pages / Jekyll
"minima" site, Read the Docs' Sphinx theme, a package registry's README page) with what a
crawler sees on such sites: navigation bar, sidebar with the section's pages, breadcrumbs,
"edit this page", version switcher, previous/next links, footer. The real generators used
beside them (MkDocs, Sphinx, pandoc's standalone page, the projects' own HTML) bring their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape


@dataclass(frozen=True)
class Page:
    """Everything a template needs to wrap one rendered body."""

    site: str  # the project, e.g. "npm"
    release: str  # e.g. "10.9.0"
    path: str  # the source path, e.g. "commands/npm-install.md"
    title: str
    body: str  # rendered HTML of the document
    nav: Sequence[tuple[str, str]] = ()  # (title, href) of the pages of its section
    headings: Sequence[str] = ()
    previous: tuple[str, str] | None = None
    next: tuple[str, str] | None = None
    updated: str = "2024-01-01"
    repo: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _links(items: Sequence[tuple[str, str]], active: str = "") -> str:
    return "".join(
        f'<li{" class=active" if title == active else ""}><a href="{escape(href)}">'
        f"{escape(title)}</a></li>"
        for title, href in items
    )


def _head(title: str) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}'
        '</title><meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="/assets/site.css"><script src="/assets/site.js"></script>'
        "</head>"
    )


def docusaurus(page: Page) -> str:
    """A Docusaurus docs page: navbar with version dropdown, category sidebar, TOC, pager."""
    pager = ""
    if page.previous:
        pager += f'<a class="pagination-nav__link" href="{escape(page.previous[1])}">'
        pager += f"<div>Previous</div><div>« {escape(page.previous[0])}</div></a>"
    if page.next:
        pager += f'<a class="pagination-nav__link" href="{escape(page.next[1])}">'
        pager += f"<div>Next</div><div>{escape(page.next[0])} »</div></a>"
    toc = "".join(f"<li><a href='#'>{escape(h)}</a></li>" for h in page.headings)
    return (
        _head(f"{page.title} | {page.site} docs")
        + '<body><div id="__docusaurus"><nav class="navbar"><a class="navbar__brand" href="/">'
        f"<b>{escape(page.site)}</b></a><a href='/docs'>Docs</a><a href='/api'>API</a>"
        "<a href='/blog'>Blog</a><div class='dropdown'><a href='#'>"
        f"v{escape(page.release)}</a><ul><li><a href='/docs/next'>Next</a></li>"
        f"<li><a href='/docs'>v{escape(page.release)}</a></li></ul></div>"
        f"<a href='{escape(page.repo)}'>GitHub</a><input placeholder='Search'></nav>"
        '<div class="main-wrapper"><aside class="theme-doc-sidebar-container"><nav><ul>'
        + _links(page.nav, page.title)
        + "</ul></nav></aside><main><nav aria-label='Breadcrumbs'><ul><li><a href='/'>Home"
        f"</a></li><li>{escape(page.title)}</li></ul></nav><article><div class='markdown'>"
        f"{page.body}</div></article><footer class='theme-doc-footer'>"
        f"<a href='{escape(page.repo)}/edit/main/docs/{escape(page.path)}'>Edit this page</a>"
        f"<span>Last updated on {escape(page.updated)}</span></footer>"
        f"<nav class='pagination-nav'>{pager}</nav></main>"
        f"<div class='theme-doc-toc-desktop'><ul>{toc}</ul></div></div>"
        "<footer class='footer'><div class='footer__links'><div><div>Docs</div><ul>"
        "<li><a href='/docs'>Getting started</a></li><li><a href='/api'>API reference</a></li>"
        "</ul></div><div><div>Community</div><ul><li><a href='/discussions'>Discussions</a></li>"
        "<li><a href='/chat'>Chat</a></li></ul></div><div><div>More</div><ul>"
        f"<li><a href='/blog'>Blog</a></li><li><a href='{escape(page.repo)}'>GitHub</a></li>"
        f"</ul></div></div><div class='footer__copyright'>Copyright © 2024 {escape(page.site)}"
        " contributors. Built with Docusaurus.</div></footer></div></body></html>"
    )


def jekyll(page: Page) -> str:
    """A GitHub Pages site (Jekyll "minima"): a light header, the page, a footer."""
    return (
        _head(f"{page.title} | {page.site}")
        + '<body><header class="site-header"><div class="wrapper"><a class="site-title" '
        f"href='/'>{escape(page.site)}</a><nav class='site-nav'><a href='/'>Home</a>"
        "<a href='/docs/'>Documentation</a><a href='/about/'>About</a></nav></div></header>"
        "<main class='page-content'><div class='wrapper'><article class='post'>"
        f"<header><h1 class='post-title'>{escape(page.title)}</h1></header>"
        f"<div class='post-content'>{page.body}</div></article></div></main>"
        "<footer class='site-footer'><div class='wrapper'><h2 class='footer-heading'>"
        f"{escape(page.site)}</h2><div class='footer-col-wrapper'><ul><li>"
        f"{escape(page.site)} documentation</li></ul><ul><li><a href='{escape(page.repo)}'>"
        "GitHub</a></li></ul></div></div></footer></body></html>"
    )


def readthedocs(page: Page) -> str:
    """The Read the Docs Sphinx theme: side navigation with version, breadcrumbs, pager."""
    pager = ""
    if page.previous:
        pager += f"<a href='{escape(page.previous[1])}' class='btn'>Previous</a>"
    if page.next:
        pager += f"<a href='{escape(page.next[1])}' class='btn'>Next</a>"
    return (
        _head(f"{page.title} — {page.site} {page.release} documentation")
        + "<body class='wy-body-for-nav'><div class='wy-grid-for-nav'><nav "
        "class='wy-nav-side'><div class='wy-side-nav-search'><a href='/'>"
        f"{escape(page.site)}</a><div class='version'>{escape(page.release)}</div>"
        "<form><input type='text' placeholder='Search docs'></form></div>"
        "<div class='wy-menu wy-menu-vertical'><p class='caption'>Contents</p><ul>"
        + _links(page.nav, page.title)
        + "</ul></div></nav><section class='wy-nav-content-wrap'><div class='wy-nav-content'>"
        "<div role='navigation' aria-label='breadcrumbs navigation'><ul class='wy-breadcrumbs'>"
        f"<li><a href='/'>Docs</a> »</li><li>{escape(page.title)}</li>"
        f"<li class='wy-breadcrumbs-aside'><a href='{escape(page.repo)}/blob/master/docs/"
        f"{escape(page.path)}'>Edit on GitHub</a></li></ul><hr></div>"
        f"<div class='document'>{page.body}</div><footer><div class='rst-footer-buttons'>"
        f"{pager}</div><hr><div role='contentinfo'><p>© Copyright {escape(page.site)} "
        f"authors. Revision {escape(page.extra.get('revision', page.release))}.</p></div>"
        "Built with <a href='https://www.sphinx-doc.org/'>Sphinx</a> using a theme provided by "
        "<a href='https://readthedocs.org'>Read the Docs</a>.</footer></div></section></div>"
        "<div class='rst-versions'><span class='rst-current-version'>v: "
        f"{escape(page.release)}</span><dl><dt>Versions</dt><dd><a href='/en/latest/'>latest"
        f"</a></dd><dd><a href='/en/stable/'>stable</a></dd></dl><dl><dt>Downloads</dt>"
        "<dd><a href='#'>pdf</a></dd><dd><a href='#'>html</a></dd></dl></div></body></html>"
    )


def registry(page: Page) -> str:
    """A package registry's README page: header, the README, a sidebar of package facts."""
    facts = page.extra
    return (
        _head(f"{page.site} - npm")
        + "<body><header><a href='/'>npm</a><nav><a href='/products/pro'>Pro</a>"
        "<a href='/products/teams'>Teams</a><a href='/pricing'>Pricing</a>"
        "<a href='/docs'>Documentation</a></nav><form><input placeholder='Search packages'>"
        "<button>Search</button></form><a href='/signup'>Sign Up</a><a href='/login'>Sign In"
        f"</a></header><main><h1>{escape(page.site)}</h1><span>{escape(page.release)} • "
        f"Public • Published {escape(page.updated)}</span><ul class='tabs'><li>Readme</li>"
        "<li>Code Beta</li><li>Dependencies</li><li>Dependents</li><li>Versions</li></ul>"
        f"<article id='readme'>{page.body}</article><aside><h3>Install</h3><p><code>npm i "
        f"{escape(page.site)}</code></p><h3>Repository</h3><p>{escape(page.repo)}</p>"
        f"<h3>Version</h3><p>{escape(page.release)}</p><h3>License</h3>"
        f"<p>{escape(facts.get('license', 'MIT'))}</p><h3>Last publish</h3>"
        f"<p>{escape(page.updated)}</p></aside></main><footer><nav><h3>Support</h3><ul>"
        "<li>Help</li><li>Advisories</li><li>Status</li><li>Contact npm</li></ul><h3>Company"
        "</h3><ul><li>About</li><li>Blog</li><li>Press</li></ul><h3>Terms &amp; Policies</h3>"
        "<ul><li>Policies</li><li>Terms of Use</li><li>Code of Conduct</li><li>Privacy</li>"
        "</ul></nav></footer></body></html>"
    )


def repository(page: Page) -> str:
    """A source host's repository page showing the README under the file list header."""
    return (
        _head(f"{page.repo.removeprefix('https://github.com/')}: {page.site}")
        + "<body><header><a href='/'>Skip to content</a><nav><a href='/features'>Product</a>"
        "<a href='/solutions'>Solutions</a><a href='/pricing'>Pricing</a></nav>"
        "<input placeholder='Search or jump to...'><a href='/login'>Sign in</a></header>"
        f"<main><div class='repohead'><strong>{escape(page.site)}</strong> Public"
        "<a href='#'>Notifications</a><a href='#'>Fork</a><a href='#'>Star</a></div>"
        "<nav class='reponav'><a href='#'>Code</a><a href='#'>Issues</a><a href='#'>"
        "Pull requests</a><a href='#'>Actions</a><a href='#'>Security</a><a href='#'>"
        "Insights</a></nav><div class='readme'><h2>README.md</h2>"
        f"<article class='markdown-body'>{page.body}</article></div></main><footer>"
        "<ul><li>Terms</li><li>Privacy</li><li>Security</li><li>Status</li><li>Docs</li>"
        "<li>Contact</li></ul></footer></body></html>"
    )


def plain(page: Page) -> str:
    """A minimal page: title, the body, one footer line (wikis, personal sites, blogs)."""
    return (
        _head(page.title) + f"<body><header><a href='/'>{escape(page.site)}</a></header><main><h1>"
        f"{escape(page.title)}</h1>{page.body}</main><footer>{escape(page.site)}</footer>"
        "</body></html>"
    )


TEMPLATES: dict[str, Callable[[Page], str]] = {
    "docusaurus": docusaurus,
    "jekyll": jekyll,
    "readthedocs": readthedocs,
    "registry": registry,
    "repository": repository,
    "plain": plain,
}
