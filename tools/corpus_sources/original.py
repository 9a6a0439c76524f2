"""The original sources of the development corpus: real documents on this machine.

* ``rust``: the HTML documentation of two Rust toolchains (stable 1.95 and nightly 1.97):
  rustdoc API pages and mdbook books. The same path in both releases is a "new version" pair.
* ``html``: other HTML manuals (libxslt, valgrind, libffi; the npm and Node.js manuals moved to
  the ``site:`` families, which render them several ways).
* ``license``: license files of installed Python packages and Debian ``copyright`` files.
* ``man``: English man pages (troff macros stripped).
* ``pydoc``: docstrings of the Python standard library in nine Python releases (2.7 to 3.13)
  and of vendored copies of packages (pip's ``_vendor``, gsutil's ``third_party``).
"""

from __future__ import annotations

import gzip
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from corpus_sources.common import Doc, page_doc, sampled

RUST = Path("/root/.rustup/toolchains")
TOOLCHAINS = ("stable-x86_64-unknown-linux-gnu", "nightly-x86_64-unknown-linux-gnu")
BOOKS = (
    "book",
    "cargo",
    "clippy",
    "edition-guide",
    "embedded-book",
    "nomicon",
    "reference",
    "rust-by-example",
    "rustc",
    "rustdoc",
    "style-guide",
    "unstable-book",
    "error_codes",
)
API = ("std", "core", "alloc", "proc_macro", "test", "std_detect")
OTHER_HTML = (
    "/usr/share/doc/libxslt1-dev",
    "/usr/share/doc/valgrind/html",
    "/usr/share/doc/libffi8/html",
)
PYENV = Path("/root/.pyenv/versions")


# ---- HTML ----------------------------------------------------------------------------------


def html_doc(path: Path, doc_id: str, source: str) -> Doc | None:
    return page_doc(path.read_bytes(), path.as_uri(), doc_id, source)


def rust_docs(scale: float) -> Iterator[Doc]:
    """Rust HTML docs; a path is sampled once and taken from every toolchain that has it."""
    rates = {"books": 0.5 * scale, "api": 0.2 * scale, "core": 0.04 * scale}
    for toolchain in TOOLCHAINS:
        root = RUST / toolchain / "share/doc/rust/html"
        release = toolchain.split("-")[0]
        for section in BOOKS + API:
            rate = rates["books"] if section in BOOKS else rates["api"]
            rate = rates["core"] if section == "core" else rate
            for path in sorted((root / section).rglob("*.html")):
                rel = path.relative_to(root).as_posix()
                if sampled(rel, rate):
                    doc = html_doc(path, f"rust-{release}:{rel}", "rust")
                    if doc is not None:
                        yield doc


def other_html_docs() -> Iterator[Doc]:
    for base in map(Path, OTHER_HTML):
        for path in sorted(base.rglob("*.htm*")):
            doc = html_doc(path, f"html:{path}", "html")
            if doc is not None:
                yield doc


# ---- licenses -----------------------------------------------------------------------------


def license_docs() -> Iterator[Doc]:
    patterns = ("LICENSE*", "LICENCE*", "COPYING*")
    roots = (PYENV, Path("/usr/lib/google-cloud-sdk"), Path("/usr/lib/node_modules"))
    seen: set[Path] = set()
    for root in roots:
        for pattern in patterns:
            for path in sorted(root.rglob(pattern)):
                if path.is_file() and path not in seen and path.stat().st_size < 200_000:
                    seen.add(path)
                    yield Doc(f"license:{path}", "", read_text(path), "license")
    for path in sorted(Path("/usr/share/doc").glob("*/copyright")):
        yield Doc(f"license:{path}", "", read_text(path), "license")


def read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


# ---- man pages ----------------------------------------------------------------------------

_ESCAPES = re.compile(
    r"\\(?:f[BIRPC]|f\(..|f\[[^]]*\]|\(..|\[[^]]*\]|\*\(..|\*.|s[-+]?\d|[&e|^0 ])"
)
_MACRO = re.compile(r"^[.'](\w+)\s*(.*)$")
_TEXT_MACROS = {
    "SH",
    "SS",
    "B",
    "I",
    "BR",
    "RB",
    "IR",
    "RI",
    "BI",
    "IB",
    "SM",
    "TP",
    "IP",
    "Nm",
    "Sh",
    "Ss",
    "Nd",
    "Ar",
    "Fl",
    "Pa",
    "It",
    "Xr",
    "Dt",
    "Op",
    "Cm",
    "Dv",
    "Em",
}


def troff_text(source: str) -> str:
    """Readable text of a man page: comments and layout requests dropped, escapes removed."""
    lines: list[str] = []
    for raw in source.splitlines():
        if raw.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        macro = _MACRO.match(raw)
        if macro and macro.group(1) not in _TEXT_MACROS:
            continue
        text = macro.group(2).replace('"', "") if macro else raw
        lines.append(_ESCAPES.sub(" ", text.replace("\\-", "-")).replace("\\", ""))
    return "\n".join(lines)


def man_docs(scale: float) -> Iterator[Doc]:
    rates = {"man1": 0.08, "man2": 0.5, "man3": 0.25, "man5": 1.0, "man7": 1.0, "man8": 0.5}
    for section, rate in rates.items():
        for path in sorted(Path("/usr/share/man", section).glob("*.gz")):
            if path.is_symlink() or not sampled(path.name, rate * scale):
                continue
            source = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
            if source.lstrip().startswith(".so "):
                continue  # a redirect to another page
            yield Doc(f"man:{section}/{path.name}", path.name, troff_text(source), "man")


# ---- Python docstrings --------------------------------------------------------------------


def docstrings(source: str) -> str:
    """The string statements of a module (its docstrings), via the tokenizer: works on 2.7."""
    found: list[str] = []
    starts_statement = True
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and starts_statement:
                found.append(_unquote(token.string))
            if token.type not in (tokenize.COMMENT, tokenize.NL):
                starts_statement = token.type in (
                    tokenize.NEWLINE,
                    tokenize.INDENT,
                    tokenize.DEDENT,
                )
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return "\n\n".join(found)


def _unquote(literal: str) -> str:
    body = literal.lstrip("rRuUbBfF")
    quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
    return body[len(quote) : len(body) - len(quote)]


def python_module_docs(scale: float) -> Iterator[Doc]:
    roots = [*sorted(PYENV.glob("*/lib/python*")), Path("/usr/lib/python3.11")]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(("test", "lib2to3/tests", "idlelib")) or "/test" in rel:
                continue
            if "site-packages" in rel:
                if "/pip/_vendor/" not in rel or not sampled(rel, 0.3 * scale):
                    continue
            elif not sampled(rel, 0.12 * scale):
                continue
            yield from _module_doc(path, f"pydoc:{root.name}/{rel}", rel)
    vendored = Path("/usr/lib/google-cloud-sdk/platform/gsutil/third_party")
    for path in sorted(vendored.rglob("*.py")):
        rel = path.relative_to(vendored).as_posix()
        if "test" not in rel and sampled(rel, 0.3 * scale):
            yield from _module_doc(path, f"pydoc:gsutil/{rel}", rel)


def _module_doc(path: Path, doc_id: str, title: str) -> Iterator[Doc]:
    text = docstrings(read_text(path))
    if text.strip():
        yield Doc(doc_id, title, text, "pydoc")


# ---- texts for the short pages ---------------------------------------------------------------

SHORT_PYTHON = PYENV / "3.11.7/lib/python3.11"


def short_sources(scale: float) -> Iterator[tuple[str, str, str, str]]:
    """(source, key, title, text) of the documents the short pages are cut from: docstrings of
    stdlib modules (Python 3.11) and man pages of sections 1 and 8 (but gcloud's)."""
    for path in sorted(SHORT_PYTHON.rglob("*.py")):
        rel = path.relative_to(SHORT_PYTHON).as_posix()
        if rel.startswith(("test", "site-packages", "idlelib", "lib2to3")) or "/test" in rel:
            continue
        if sampled("short:" + rel, scale):
            module = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            yield "pydoc", rel, f"{module} — Python module reference", docstrings(read_text(path))
    for section in ("man1", "man8"):
        for path in sorted(Path("/usr/share/man", section).glob("*.gz")):
            # gcloud's thousands of generated pages would swamp the family: left out.
            if path.name.startswith("gcloud") or path.is_symlink():
                continue
            if not sampled("short:" + path.name, 0.7 * scale):
                continue
            source = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
            if not source.lstrip().startswith(".so "):
                name = path.name.removesuffix(".gz")
                yield "man", f"{section}/{name}", f"{name} - Linux manual page", troff_text(source)
