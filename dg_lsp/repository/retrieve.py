"""What a completion reads of the workspace index (`RepositoryContext`), each part only where
it can pay, so that a cursor that does not need it costs nothing:

- its files' texts at the cursor's place, among the completion's candidates
  (dg_lsp.repository.candidates reads them; `choices` says whether it may);
- `snippets`: ahead of the prefix, as comments: the definitions (signature and first line of
  documentation) of the names the cursor's line uses that another file defines, and, where
  neither the file nor the repository offers a choice and no definition was found, the window
  of a nearby file whose names are most like the code at the cursor.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from dg_lsp.repository.index import RepositoryIndex, repository_root
from dg_lsp.syntax.languages import LanguageSpec
from engine.text.canvas import other_file_snippet

WINDOW_LINES = 6  # a repository window: the canvas's prefix holds a few short lines of it
# Windows are read from the nearest files only: each new file's windows cost a scan of it.
WINDOW_FILES = 8
NEAR_CURSOR_LINES = 6  # the lines before the cursor whose names a window is compared with
MIN_NAME_CHARS = 3  # shorter names (i, x, db) are defined everywhere

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A definition of a name in the current file, in any of the languages (the file's own text
# is the buffer's: the index's copy of it may be older).
_DEFINES = re.compile(r"\b(?:def|class|function|fn|func|type|struct|enum|trait|interface"
                      r"|const|let|var)\s+([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class RepositoryContext:
    """What a completion in the file `path` of `index` may read of it, and which parts."""

    index: RepositoryIndex
    path: str  # the current file's path in the index; never read from the index itself
    choices: bool = True  # other files' texts among the candidates
    snippets: bool = True
    # Whether the confidence gate reads a chosen text of another file as one of the file's
    # own (its `repeated` input), or as a text the model wrote.
    gate: bool = True

    def snippets_for(self, head: str, line_prefix: str, language: LanguageSpec,
                     budget: int, have_choices: bool) -> str:
        """The snippets ahead of the prefix for a cursor after `head` (the text before it)
        on a line beginning `line_prefix`, within `budget` characters."""
        if not self.snippets or budget <= 0:
            return ""
        chosen = self._definitions(head, line_prefix, language, budget)
        budget -= len(chosen)
        if not chosen and not have_choices and budget > 0:
            chosen += self._window(head, language, budget)
        return chosen

    def _definitions(self, head: str, line_prefix: str, language: LanguageSpec, budget: int
                     ) -> str:
        """The definitions of the names of the cursor's line (the nearest to the cursor
        first) that the file before the cursor (`head`) does not define itself."""
        nearest: list[str] | None = None
        chosen: list[str] = []
        defined: set[str] | None = None  # the names `head` defines, read once if needed
        for name in reversed(dict.fromkeys(_IDENTIFIER.findall(line_prefix))):
            if len(name) < MIN_NAME_CHARS:
                continue
            definers = [p for p in self.index.definers(name) if p != self.path]
            if not definers:
                continue
            if defined is None:
                defined = set(_DEFINES.findall(head))
            if name in defined:
                continue
            if nearest is None:
                nearest = self.index.nearest(self.path)
            rank = {p: i for i, p in enumerate(nearest)}
            where = min(definers, key=lambda p: (rank.get(p, len(rank)), p))
            symbols = self.index.symbols(where, fresh=False)
            if symbols is None or name not in symbols.definitions:
                continue
            snippet = other_file_snippet(where, symbols.definitions[name], language.line_comment)
            if len(snippet) <= budget:
                chosen.append(snippet)
                budget -= len(snippet)
        return "".join(reversed(chosen))  # the nearest name's last: next to the prefix

    def _window(self, head: str, language: LanguageSpec, budget: int) -> str:
        """The window of a nearby file most like the lines before the cursor (Jaccard of
        their names), where it fits."""
        near = head[head.rfind("\n", 0, max(0, len(head) - 80 * NEAR_CURSOR_LINES)) + 1:]
        wanted = frozenset(n for n in _IDENTIFIER.findall(near) if len(n) >= MIN_NAME_CHARS)
        if not wanted:
            return ""
        best = (0.0, "", "")
        for path in self.index.nearest(self.path, WINDOW_FILES):
            entry = self.index.get(path)
            if entry is None or entry.language != language:
                continue
            for window, names in line_windows(entry.text):
                score = len(names & wanted) / len(names | wanted) if names else 0.0
                if score > best[0]:
                    best = (score, path, window)
        if not best[1]:
            return ""
        snippet = other_file_snippet(best[1], best[2], language.line_comment)
        return snippet if len(snippet) <= budget else ""


@functools.lru_cache(maxsize=512)
def line_windows(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """(text, names) of each window of WINDOW_LINES lines of `text` (a stride of half a
    window), computed once per text."""
    lines = text.split("\n")
    step = WINDOW_LINES // 2
    windows = []
    for first in range(0, max(1, len(lines) - step), step):
        window = "\n".join(lines[first:first + WINDOW_LINES])
        names = frozenset(n for n in _IDENTIFIER.findall(window) if len(n) >= MIN_NAME_CHARS)
        if names:
            windows.append((window, names))
    return tuple(windows)


def context_for_file(path: Path) -> RepositoryContext | None:
    """The repository context of a file a command is given: its repository indexed now
    (bounded as the language server's), the file read from its buffer, not the index."""
    index = RepositoryIndex(repository_root(path))
    relative = index.relative(path)
    if relative is None:
        return None
    index.build()
    return RepositoryContext(index, relative)
