"""What a rewrite changes that its instruction did not ask for: the name of a function or class
it rewrites, or that function's parameters (callers elsewhere would break).

The definitions come from the query beside the language (`grammars/<language>/
signature.scm`: @function / @class with its @name, the @parameter names of its @parameters),
read in the original selection and in the new text: those whose name lies inside. New
definitions are paired with the old by name, then the rest in order; an old one left without
a partner was removed. A parameter missing from its definition's new list was renamed (to
the next new parameter the old list did not have) or dropped; added parameters are not
refused.

A change is asked for when the instruction mentions renaming or the signature, or names what
the change brings in or takes away (`rename it to read_lines`, `drop verbose`). A language
without a signature.scm is not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tree_sitter as ts

from dg_lsp.syntax.languages import LanguageSpec
from dg_lsp.syntax.names import mentions
from dg_lsp.syntax.query import matches

QUERY = "signature"
_ASKS_FOR_ANY = re.compile(r"renam|signature", re.IGNORECASE)


@dataclass(frozen=True)
class Definition:
    name: str
    parameters: tuple[str, ...] | None  # None: a class, or a parameter list not all inside


@dataclass(frozen=True)
class Change:
    message: str  # "renames `word_count` to `read_lines`"
    asked_by: tuple[str, ...]  # names an instruction that asks for the change mentions


def checked(language: LanguageSpec | None) -> bool:
    return language is not None and language.has_query(QUERY)


def definitions(language: LanguageSpec, tree: ts.Tree, start_byte: int, end_byte: int
                ) -> list[Definition]:
    """The definitions whose name lies in bytes [start_byte, end_byte), in document order.
    One whose header does not parse is left out: its signature cannot be read."""
    headers: list[tuple[ts.Node, ts.Node | None]] = []
    parameters: dict[tuple[int, int], list[ts.Node]] = {}
    for _, caps in matches(language.query(QUERY), tree.root_node, (start_byte, end_byte)):
        if "parameter" in caps:
            node = caps["parameters"][0]
            parameters.setdefault((node.start_byte, node.end_byte), []).extend(caps["parameter"])
        elif "name" in caps:
            headers.append((caps["name"][0], caps.get("parameters", [None])[0]))
    found = []
    for name, params in sorted(headers, key=lambda header: header[0].start_byte):
        if not start_byte <= name.start_byte < name.end_byte <= end_byte:
            continue
        if params is not None and params.has_error:
            continue
        names = None
        if params is not None and start_byte <= params.start_byte and params.end_byte <= end_byte:
            nodes = parameters.get((params.start_byte, params.end_byte), [])
            names = tuple(_text(n) for n in sorted(nodes, key=lambda n: n.start_byte))
        found.append(Definition(_text(name), names))
    return found


def changes(old: list[Definition], new: list[Definition]) -> list[Change]:
    """How `new` (the rewrite's definitions) renames, removes or changes the parameters of
    `old` (the selection's)."""
    partner: dict[int, Definition] = {}
    unused = list(new)
    for i, definition in enumerate(old):
        same = next((d for d in unused if d.name == definition.name), None)
        if same is not None:
            partner[i] = same
            unused.remove(same)
    unpaired = [i for i in range(len(old)) if i not in partner]
    for i, definition in zip(unpaired, unused, strict=False):
        partner[i] = definition
    found = []
    for i, definition in enumerate(old):
        if i not in partner:
            found.append(Change(f"removes `{definition.name}`", (definition.name,)))
            continue
        renamed = partner[i]
        if renamed.name != definition.name:
            found.append(Change(f"renames `{definition.name}` to `{renamed.name}`",
                                (renamed.name,)))
        found += _parameter_changes(definition, renamed)
    return found


def refusal(
    language: LanguageSpec,
    old: tuple[ts.Tree, int, int],
    new: tuple[ts.Tree, int, int],
    instruction: str | None,
) -> str | None:
    """What the rewrite changes unasked (the first such change), or None. `old` and `new`:
    a tree and the byte range of the selection in it, before and after."""
    if not checked(language):
        return None
    found = changes(definitions(language, *old), definitions(language, *new))
    unasked = [change for change in found if not _asked(change, instruction)]
    return unasked[0].message if unasked else None


def _parameter_changes(old: Definition, new: Definition) -> list[Change]:
    if old.parameters is None or new.parameters is None:
        return []
    missing = [p for p in old.parameters if p not in new.parameters]
    added = [p for p in new.parameters if p not in old.parameters]
    found = []
    for i, parameter in enumerate(missing):
        if i < len(added):
            found.append(Change(f"renames parameter `{parameter}` of `{new.name}` to "
                                f"`{added[i]}`", (parameter, added[i])))
        else:
            found.append(Change(f"drops parameter `{parameter}` of `{new.name}`", (parameter,)))
    return found


def _asked(change: Change, instruction: str | None) -> bool:
    if not instruction:
        return False
    return bool(_ASKS_FOR_ANY.search(instruction)) or any(
        mentions(instruction, name) for name in change.asked_by)


def _text(node: ts.Node) -> str:
    return node.text.decode("utf-8", errors="replace")
