"""The text extraction helpers of ``tools/build_corpus.py`` (man pages, docstrings, sampling)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO

TOOL = REPO / "tools" / "build_corpus.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_corpus", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_corpus", module)
    spec.loader.exec_module(module)
    return module


def test_troff_text_keeps_words_and_drops_markup() -> None:
    source = (
        '.\\" a comment\n.TH LS 1\n.SH NAME\nls \\- list \\fBdirectory\\fR contents\n.PP\n.B \\-a\n'
    )
    text = _tool().troff_text(source)
    assert text.split() == ["NAME", "ls", "-", "list", "directory", "contents", "-a"]


def test_docstrings_of_python2_and_python3_sources() -> None:
    tool = _tool()
    py2 = (
        'u"""Module doc."""\nprint "x"\n'
        "def f():\n    r'''Function doc.'''\n    x = 'not a doc'\n"
    )
    assert tool.docstrings(py2) == "Module doc.\n\nFunction doc."
    assert tool.docstrings("def broken(:\n") == ""


def test_sampling_is_deterministic() -> None:
    tool = _tool()
    assert tool.stable_fraction("x") == tool.stable_fraction("x") != tool.stable_fraction("y")
    assert [tool.sampled(f"k{i}", 0.5) for i in range(20)] == [
        tool.sampled(f"k{i}", 0.5) for i in range(20)
    ]


def _text(words: int) -> str:
    vocabulary = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    return "\n".join(
        " ".join(vocabulary[(i * 7 + j) % 8] + str(i) for j in range(10))
        for i in range(words // 10)
    )


def test_short_window_and_its_edits_are_deterministic() -> None:
    _tool()
    from corpus_sources import short

    text = _text(1000)
    lines = short.window(text, "k1")
    assert lines is not None and lines == short.window(text, "k1")
    assert short.MIN_WORDS <= sum(len(line.split()) for line in lines) <= short.MAX_WORDS
    assert short.window(_text(100), "k1") is None
    one = short.replace_word(lines, "k1")
    before, after = " ".join(lines).split(), " ".join(one).split()
    assert len(before) == len(after)
    assert sum(a != b for a, b in zip(before, after, strict=True)) == 1
    assert short.stamp("a") == short.stamp("a") != short.stamp("b")
    assert short.stamp("a").startswith("Last updated 20") and short.stamp("a").endswith("visitors")
    edited = short.edit_words(lines, "k1")
    assert edited == short.edit_words(lines, "k1") and edited != lines
    variants = short.variants(lines, "k1")
    assert variants["orig"] == lines and len(variants) >= 3


def test_pair_relations_from_ids() -> None:
    tool = _tool()
    from corpus_sources.report import relation

    def doc(ident: str, source: str) -> object:
        return tool.Doc(ident, "", "", source)

    npm = "site:npm"
    a = doc("npm@10.9.0/official:commands/npm-ci.md", npm)
    assert relation(a, doc("npm@10.9.0/mkdocs-rtd:commands/npm-ci.md", npm)) == "mirror"
    assert relation(a, doc("npm@10.8.2/official:commands/npm-ci.md", npm)) == "release"
    assert relation(a, doc("npm@10.8.2/mkdocs-rtd:commands/npm-ci.md", npm)) == "mirror+release"
    assert relation(a, doc("npm@10.9.0/official:commands/npm-ls.md", npm)) == "template"
    word, orig = (
        doc("short:man/man1/ls.1#word", "short:man"),
        doc("short:man/man1/ls.1#orig", "short:man"),
    )
    assert relation(word, orig) == "short-variant"
    assert relation(word, doc("short:man/man1/cp.1#orig", "short:man")) == "short-other"
    assert relation(doc("man:x", "man"), doc("man:y", "man")) == "man"
    assert relation(doc("man:x", "man"), a) == "cross"


def test_held_out_sites_are_other_projects_and_partly_other_generators() -> None:
    _tool()
    from corpus_sources import holdout, sites

    seen: set[str] = set()
    for held_out in holdout.HELD_OUT_SETS.values():
        projects = {project for project, *_ in held_out.projects}
        assert projects == set(held_out.site_generators)
        assert not projects & set(sites.SITE_GENERATORS), "a held-out project is a development one"
        assert not projects & seen, "a project is in two held-out sets"
        seen |= projects
        used = {g for names in held_out.site_generators.values() for g in names}
        assert used <= set(holdout.HOLDOUT_GENERATORS)
        assert len(used - set(sites.GENERATORS)) >= 5, "generators the development sites never use"
        assert {f"{p}@{r}" for p, r in held_out.archives()} == set(held_out.dates)
        assert all(len(releases) >= 2 for _, releases, *_ in held_out.projects)
    # The second set's Sphinx themes are new to both others.
    first = {g for names in holdout.FIRST.site_generators.values() for g in names}
    second = {g for names in holdout.SECOND.site_generators.values() for g in names}
    assert len({g for g in second - first - set(sites.GENERATORS) if g.startswith("sphinx")}) >= 4
    assert set(holdout.archives()) == {
        a for held_out in holdout.HELD_OUT_SETS.values() for a in held_out.archives()
    }


def test_a_tree_shows_its_own_release_date_before_the_shared_table() -> None:
    _tool()
    from pathlib import Path

    from corpus_sources.sites import DATES, DEFAULT_DATE, Tree

    tree = Tree("x", "8.1.7", Path("."), ".rst", (), "")
    assert tree.date == DATES["8.1.7"]
    assert Tree("x", "9.9.9", Path("."), ".rst", (), "").date == DEFAULT_DATE
    assert Tree("x", "8.1.7", Path("."), ".rst", (), "", updated="2024-12-01").date == "2024-12-01"


def test_the_shops_wrap_short_distinct_texts_in_a_light_and_a_heavy_template(
    tmp_path: Path,
) -> None:
    _tool()
    from corpus_sources import shop

    from crawler.extract import extract

    names = ["archive", "buffer", "cache", "daemon", "editor", "filter", "kernel", "socket"]
    texts = [(f"doc{i}", [f"w{i}x{j}" for j in range(400)] + names) for i in range(40)]
    written = shop.write_shops(tmp_path / "a", 0.2, texts)
    shop.write_shops(tmp_path / "b", 0.2, texts)
    # 96 products, 12 categories (each also sorted by price) and a home page a host
    assert written == {"shop.light": 96 + 2 * 12 + 1, "shop.heavy": 96 + 2 * 12 + 1}
    files = sorted(
        p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file()
    )
    assert all(
        (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files
    )

    def words(host: str, page: str) -> list[str]:
        body = (tmp_path / "a" / host / page).read_bytes()
        return extract(body, "http://shop.test/").text.split()

    def description(host: str, product: int) -> str:
        return " ".join(w for w in words(host, f"p/{product}.html") if re.fullmatch(r"w\d+x\d+", w))

    # The template is what a product page shares with the home page.
    for host, low, high in (("shop.light", 250, 400), ("shop.heavy", 900, 1_200)):
        home = set(words(host, "index.html"))
        shared = sum(1 for word in words(host, "p/0.html") if word in home)
        assert low <= shared <= high, (host, shared)
        assert 25 <= len(description(host, 0).split()) <= 200
    # Every product's description is its own; the hosts share none.
    light = {description("shop.light", i) for i in range(24)}
    heavy = {description("shop.heavy", i) for i in range(24)}
    assert len(light) == len(heavy) == 24 and not light & heavy
    # The planted duplicates: a category sorted by price, products linked with a referrer.
    by_price = words("shop.heavy", "c/0.html?sort=price")
    assert sorted(words("shop.heavy", "c/0.html")) == sorted(by_price)
    assert "?ref=also" in (tmp_path / "a" / "shop.heavy" / "p" / "0.html").read_text()


def test_the_shops_need_man_pages_and_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = _tool()
    from corpus_sources import shop

    monkeypatch.setattr(shop, "MAN", tmp_path / "no-man-pages")
    assert tool.main(["--sites", str(tmp_path / "shops"), "--shop"]) == 2
    assert "too few man pages" in capsys.readouterr().err


def test_the_languages_family_counts_and_edits_cjk_text_a_character_at_a_time() -> None:
    _tool()
    from corpus_sources import languages

    assert languages._tokens("列出目录 ls -a：内容") == "列 出 目 录 ls -a： 内 容"
    # Spaces go only between two such characters, so the page's tokens are unchanged.
    assert languages._untokens(languages._tokens("列出目录 ls -a：内容")) == "列出目录 ls -a： 内容"
    hanzi = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(2000))
    source = ".TH T 1\n.SH 描述\n" + "\n".join(hanzi[i : i + 40] for i in range(0, 2000, 40))
    docs = {d.id.rpartition("#")[2]: d for d in languages.short_pages("zh_CN", "man1/w.1", source)}
    assert docs["orig"].source == "short:zh_CN" and docs["orig"].id == "short:zh_CN/man1/w.1#orig"
    body = [line for line in docs["orig"].text.splitlines() if line[0] in hanzi]
    assert languages.short.MIN_WORDS <= sum(map(len, body)) <= languages.short.MAX_WORDS
    # w.1 draws the "word" variant: one character replaced by another of the page
    orig, word = docs["orig"].text, docs["word"].text
    assert sum(a != b for a, b in zip(orig, word, strict=True)) == 1


def test_the_languages_family_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = _tool()
    from corpus_sources import languages

    monkeypatch.setattr(languages, "MAN", tmp_path / "no-man-pages")
    assert tool.main([str(tmp_path / "out"), "--families", "languages"]) == 2
    err = capsys.readouterr().err
    assert "apt-get install" in err and "manpages-de" in err and "manpages-zh" in err
