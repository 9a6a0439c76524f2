"""Generic reST directives and roles for names a renderer does not know (a project's own
Sphinx extensions), shown as such a site would: the text stays, the semantics go.

Also a Sphinx extension (``extensions=corpus_sources.lenient``): registers them for every
unknown name used in the source tree.
"""

from __future__ import annotations

from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import Directive, directives


class _AnyOptions(dict[str, Any]):
    """An option spec that accepts every option (values kept as text)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        return directives.unchanged


class GenericDirective(Directive):
    """Arguments as a signature line, content parsed as body text."""

    optional_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec: ClassVar[dict[str, Any]] = _AnyOptions()

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        if self.arguments:
            out.append(nodes.paragraph("", "", nodes.literal("", self.arguments[0])))
        if self.content:
            box = nodes.container()
            self.state.nested_parse(self.content, self.content_offset, box)
            out.append(box)
        return out


def generic_role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Any,
    options: dict[str, Any] | None = None,
    content: list[str] | None = None,
) -> tuple[list[nodes.Node], list[nodes.Node]]:
    """The role's text; for ``title <target>`` the title, for ``~a.b.c`` the last part."""
    text = text.strip()
    if text.endswith(">") and "<" in text:
        title = text[: text.rindex("<")].strip()
        text = title or text[text.rindex("<") + 1 : -1]
    if text.startswith(("~", "!")):
        text = text[1:].rsplit(".", 1)[-1]
    return [nodes.literal(rawtext, text)], []


def setup(app: Any) -> dict[str, Any]:
    from pathlib import Path

    from docutils.parsers.rst import roles

    from corpus_sources.render import markup_names

    texts = (
        p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(Path(app.srcdir).rglob("*"))
        if p.suffix in (".rst", ".txt") and p.is_file()
    )
    directive_names, role_names = markup_names(texts)
    known_domains = {"py", "c", "cpp", "js", "rst", "std", "math"}
    for name in sorted(directive_names):
        domain = name.split(":")[0] if ":" in name else ""
        if domain in known_domains or name in directives._directives:
            continue
        if name in directives._directive_registry:
            continue
        app.add_directive(name, GenericDirective, override=True)
    for name in sorted(role_names):
        domain = name.split(":")[0] if ":" in name else ""
        if domain in known_domains or name in roles._roles or name in roles._role_registry:
            continue
        app.add_role(name, generic_role, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
