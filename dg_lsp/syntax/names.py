"""Names a suggestion uses that its file never defines or imports (`jnp.sum(xs)` in a file
that never mentions `jnp`): a completion or an edit that uses one is refused.

What a suggestion uses and binds comes from the query beside the language
(`grammars/<language>/names.scm`: @use, @bind, @skip) over the tree of the text with
the suggestion in place, read only inside the suggestion's bytes. A name is known when the
suggestion binds it itself, when it is a builtin of the language, or when it is a word
anywhere in the document. That last rule is lenient on purpose: a word in a comment, a string
or a line tree-sitter cannot parse counts, so broken syntax never causes a refusal, and it
needs no scope analysis (a name used before its definition, or in another function, passes).
A file with a wildcard import (`from x import *`) can know any name and is not checked, nor
is a language without a names.scm.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Iterable

import tree_sitter as ts

from dg_lsp.syntax.languages import LanguageSpec
from dg_lsp.syntax.query import captures

QUERY = "names"
# Besides the words of the document: what the language gives every file.
BUILTINS = {
    "python": frozenset(dir(builtins)) | frozenset(keyword.softkwlist) | {"self", "cls"},
}
# (no \b or lookbehind before a literal: Python's re then finds the literal at C speed)
_WILDCARD_IMPORT = {"python": re.compile(r"import[ \t]+\*")}


def checked(language: LanguageSpec | None) -> bool:
    """Whether suggestions in this language are checked (it has a names query)."""
    return language is not None and language.has_query(QUERY)


def unknown_names(
    language: LanguageSpec,
    tree: ts.Tree,
    start_byte: int,
    end_byte: int,
    document: str,
) -> list[str]:
    """The names the text at bytes [start_byte, end_byte) of `tree` uses that neither it
    binds, nor the language has built in, nor `document` (the file without the suggestion)
    mentions, in the order they first appear."""
    if not checked(language) or end_byte <= start_byte:
        return []
    found = captures(language.query(QUERY), tree.root_node, (start_byte, end_byte))

    def inside(nodes: Iterable[ts.Node]) -> list[ts.Node]:
        return [n for n in nodes if n.start_byte < end_byte and n.end_byte > start_byte]

    binds = inside(found.get("bind", []))
    not_uses = {(n.start_byte, n.end_byte) for n in binds + inside(found.get("skip", []))}
    bound = {_text(n) for n in binds}
    builtin = BUILTINS.get(language.name, frozenset())
    unknown: list[str] = []
    for node in sorted(inside(found.get("use", [])), key=lambda n: n.start_byte):
        name = _text(node)
        if ((node.start_byte, node.end_byte) in not_uses or name in bound or name in builtin
                or _is_dunder(name) or name in unknown):
            continue
        if not mentions(document, name):
            unknown.append(name)
    wildcard = _WILDCARD_IMPORT.get(language.name)
    if unknown and wildcard is not None and wildcard.search(document):
        return []  # `from x import *` may have brought them in
    return unknown


def refusal(names: list[str]) -> str:
    """The reason shown to the user."""
    quoted = [f"`{name}`" for name in names[:3]]
    listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
    return f"uses {listed}, which this file never defines or imports"


def mentions(text: str, name: str) -> bool:
    """Whether `name` is a whole word somewhere in `text`. The pattern starts with the name
    itself, so re finds candidates at C speed (docs/performance.md, Code actions)."""
    for match in re.finditer(re.escape(name) + r"(?!\w)", text):
        at = match.start()
        if not at or not _word_char(text[at - 1]):
            return True
    return False


def _word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _is_dunder(name: str) -> bool:
    # __name__, __file__, __class__ ...: the module's and the interpreter's own names
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _text(node: ts.Node) -> str:
    return node.text.decode("utf-8", errors="replace")
