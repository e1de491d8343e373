"""Infill cases: one hole in one piece of code, and how to cut them from a folder of sources.

Cutting is deterministic: the same folder and seed always give the same cases, in the same order.
Kinds of hole (the single-line shape matches HumanEval-Infilling's, see `scoring`):

- single-line: one whole non-blank line, indentation and newline included.
- multi-line: 2 to 8 whole consecutive lines starting at a non-blank line.
- random-span: 8 to 200 characters starting anywhere, possibly mid-token and mid-line.

Each case carries a bounded window of context (whole lines, at most `prefix_chars` before and
`suffix_chars` after the hole), so a case is self-contained and files of any size are fine.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

KINDS = ("single-line", "multi-line", "random-span")

SOURCE_SUFFIXES = {
    ".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".rs", ".go", ".c", ".h", ".cc", ".cpp", ".hpp",
    ".java", ".kt", ".rb", ".php", ".cs", ".swift", ".scala", ".lua", ".sh", ".sql",
}
MAX_FILE_BYTES = 1_000_000
ATTEMPTS_PER_CASE = 50


@dataclass(frozen=True)
class Case:
    """One hole: the model sees `prefix` and `suffix` and should produce `middle`."""

    id: str
    kind: str  # one of KINDS
    prefix: str
    middle: str
    suffix: str
    # Execution-based cases (HumanEval) carry their test; cut cases are scored by text only.
    test: str | None = None
    entry_point: str | None = None
    # Cursor cases: the whole file before and after the hole, as an editor holds it (the
    # model-level eval reads the windows above; what is opened in an editor is the file).
    file_before: str | None = None
    file_after: str | None = None

    def document(self) -> tuple[str, int]:
        """(the text an editor holds, the cursor's offset in it)."""
        before = self.prefix if self.file_before is None else self.file_before
        after = self.suffix if self.file_after is None else self.file_after
        return before + after, len(before)


def source_files(folder: Path) -> list[Path]:
    """Source files under `folder` (hidden folders such as .git or .venv skipped), sorted so that
    cutting does not depend on the order the file system lists them in."""
    found = []
    for path in sorted(folder.rglob("*")):
        hidden = any(part.startswith(".") for part in path.relative_to(folder).parts)
        if hidden or path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            continue
        found.append(path)
    return found


def cut_cases(
    folder: Path,
    count: int,
    seed: int = 0,
    kinds: tuple[str, ...] = KINDS,
    prefix_chars: int = 2000,
    suffix_chars: int = 1000,
) -> list[Case]:
    """Cut `count` cases from the sources under `folder`, cycling through `kinds` in order."""
    texts = []
    for path in source_files(folder):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            texts.append((path.relative_to(folder).as_posix(), text))
    if not texts:
        raise ValueError(f"no readable source files under {folder}")

    rng = random.Random(seed)
    cases: list[Case] = []
    for index in range(count):
        kind = kinds[index % len(kinds)]
        for _ in range(ATTEMPTS_PER_CASE):
            name, text = rng.choice(texts)
            span = _pick_span(kind, text, rng)
            if span is not None:
                break
        else:
            raise ValueError(f"could not cut a {kind} hole from the sources under {folder}")
        start, end = span
        line = text.count("\n", 0, start) + 1
        cases.append(
            Case(
                id=f"{kind}/{name}:{line}:{index}",
                kind=kind,
                prefix=_tail_lines(text[:start], prefix_chars),
                middle=text[start:end],
                suffix=_head_lines(text[end:], suffix_chars),
            )
        )
    return cases


# Where editors ask for completions, as `dg-lsp bench` reports them (Python sources):
CURSOR_CLASSES = (
    "new line",  # after the indentation of a line whose text was cut (the whole line)
    "after =",  # the rest of the line cut after an assignment's `= `
    "after (",  # the rest of the line cut after an opening bracket
    "after .",  # the rest of the line cut after an attribute's dot
    "after ,",  # the rest of the line cut after `, `
    "after keyword",  # the rest of the line cut after `return `, `if `, `import ` ...
    "argument list",  # inside a call's brackets: the arguments cut, `)` and the rest kept
    "block header",  # at the end of a line ending in `:`: the next line cut
)
_KEYWORD = re.compile(r"\b(?:return|if|elif|while|for|in|not|and|or|import|from|raise|yield|"
                      r"with|assert|lambda|await|del|as|is) (?=\S)")
_HEADER = re.compile(r"^\s*(?:async\s+)?(?:def|class|if|elif|else|for|while|with|try|except|"
                     r"finally|match|case)\b.*:\s*$")


def cut_cursor_cases(
    folder: Path,
    count: int,
    seed: int = 0,
    classes: tuple[str, ...] = CURSOR_CLASSES,
    prefix_chars: int = 2000,
    suffix_chars: int = 1000,
) -> list[Case]:
    """`count` cases at the cursors editors complete at, about as many of each class, cut from
    the Python files under `folder`; `kind` is the cursor class. Deterministic by `seed`."""
    candidates: dict[str, list[tuple[str, str, int, int]]] = {c: [] for c in classes}
    for path in source_files(folder):
        if path.suffix != ".py":
            continue
        try:
            text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
        except (UnicodeDecodeError, OSError):
            continue
        name = path.relative_to(folder).as_posix()
        for cls, start, end in cursor_spans(text):
            if cls in candidates:
                candidates[cls].append((name, text, start, end))
    rng = random.Random(seed)
    per_class = -(-count // len(classes))
    picked = {c: rng.sample(found, min(per_class, len(found))) for c, found in candidates.items()}
    cases: list[Case] = []
    for index in range(per_class):  # interleaved, so that a --limit keeps every class
        for cls in classes:
            if index < len(picked[cls]) and len(cases) < count:
                name, text, start, end = picked[cls][index]
                line = text.count("\n", 0, start) + 1
                cases.append(Case(id=f"{cls}/{name}:{line}:{len(cases)}", kind=cls,
                                  prefix=_tail_lines(text[:start], prefix_chars),
                                  middle=text[start:end],
                                  suffix=_head_lines(text[end:], suffix_chars),
                                  file_before=text[:start], file_after=text[end:]))
    if not cases:
        raise ValueError(f"no Python source to cut cursor cases from under {folder}")
    return cases


def cursor_spans(text: str) -> list[tuple[str, int, int]]:
    """(cursor class, start, end) of every hole of each class in `text`: [start, end) is what
    the user has not typed yet. Lines in docstrings, and lines holding a string literal or a
    comment (whose text no cursor class describes), are left out."""
    spans: list[tuple[str, int, int]] = []
    lines = text.split("\n")
    offset, in_docstring = 0, False
    for number, line in enumerate(lines):
        start_of_line, offset = offset, offset + len(line) + 1
        stripped = line.strip()
        quotes = line.count('"""') + line.count("'''")
        skip = in_docstring or quotes > 0 or stripped.startswith("#") or "#" in line
        if quotes % 2:
            in_docstring = not in_docstring
        if skip or len(stripped) < 4 or "'" in line or '"' in line:
            continue
        indent = len(line) - len(line.lstrip())
        end_of_line = start_of_line + len(line)
        if indent:
            spans.append(("new line", start_of_line + indent, end_of_line))
        for match in re.finditer(r"[^=!<>]= (?=\S)", line):
            spans.append(("after =", start_of_line + match.end(), end_of_line))
        for match in re.finditer(r"\w\((?=[^)])", line):
            spans.append(("after (", start_of_line + match.end(), end_of_line))
            close = _closing_bracket(line, match.end())
            if close is not None and close > match.end():
                spans.append(("argument list", start_of_line + match.end(),
                              start_of_line + close))
        for match in re.finditer(r"\w\.(?=[A-Za-z_])", line):
            spans.append(("after .", start_of_line + match.end(), end_of_line))
        for match in re.finditer(r", (?=\S)", line):
            spans.append(("after ,", start_of_line + match.end(), end_of_line))
        for match in _KEYWORD.finditer(line):
            if match.start() >= indent:
                spans.append(("after keyword", start_of_line + match.end(), end_of_line))
        following = lines[number + 1] if number + 1 < len(lines) else ""
        if _HEADER.match(line) and following.strip() and not following.lstrip().startswith(
                ("#", '"""', "'''")):
            spans.append(("block header", end_of_line, end_of_line + 1 + len(following)))
    return spans


def _closing_bracket(line: str, after: int) -> int | None:
    """Index of the `)` that closes the bracket opened just before `after`, on this line."""
    depth = 1
    for i in range(after, len(line)):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(line[i], 0)
        if depth == 0:
            return i if line[i] == ")" else None
    return None


def _pick_span(kind: str, text: str, rng: random.Random) -> tuple[int, int] | None:
    """Character offsets [start, end) of a hole of `kind` in `text`, or None if this try failed."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    if kind == "single-line":
        candidates = [i for i, line in enumerate(lines) if line.strip() and line.endswith("\n")]
        if not candidates:
            return None
        i = rng.choice(candidates)
        return starts[i], starts[i + 1]
    if kind == "multi-line":
        size = rng.randint(2, 8)
        candidates = [
            i for i in range(len(lines) - size + 1)
            if lines[i].strip() and lines[i + size - 1].endswith("\n")
            and sum(1 for line in lines[i:i + size] if line.strip()) >= 2
        ]
        if not candidates:
            return None
        i = rng.choice(candidates)
        return starts[i], starts[i + size]
    if kind == "random-span":
        length = rng.randint(8, 200)
        if len(text) <= length:
            return None
        start = rng.randrange(0, len(text) - length)
        if not text[start:start + length].strip():
            return None
        return start, start + length
    raise ValueError(f"unknown hole kind {kind!r} (known: {', '.join(KINDS)})")


def _tail_lines(text: str, limit: int) -> str:
    """The end of `text`, at most `limit` characters, starting at a line start where possible."""
    if len(text) <= limit:
        return text
    tail = text[-limit:]
    newline = tail.find("\n")
    return tail[newline + 1:] if newline != -1 else tail


def _head_lines(text: str, limit: int) -> str:
    """The start of `text`, at most `limit` characters, ending at a line end where possible."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    newline = head.rfind("\n")
    return head[:newline + 1] if newline != -1 else head
