"""Texts the file and the repository already hold at the cursor's place: the completion's
candidates, each with where it was found and how strongly (`Candidate`).

Three cheap matchers, each over the file (the lines within REPEATS_SPAN characters of the
cursor, nearest first) and then the repository's nearest files:

- `line`: lines that begin as the cursor's line does up to the cursor (after their
  indentation) and end as it does after it; their text between is the candidate.
- `previous`: the same, among lines that follow a line equal to the cursor's previous line
  (after indentation). At a line's start, where every line begins alike, this is what the
  previous line predicts: the line that followed it elsewhere.
- `tokens`: the longest match of the last 2 to MAX_MATCH_TOKENS tokens before the cursor
  (across line ends), with what followed it to the end of that line; at a line's start, the
  line that followed.

The cursor's own line is never read (its rest is what the user has not typed). Each matcher
looks at no more than RETRIEVAL_OCCURRENCES occurrences per file, so a file costs what its
occurrences of the cursor's text do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from dg_lsp.repository.retrieve import RepositoryContext
from engine.bounds import RETRIEVAL_OCCURRENCES
from engine.edits.spans import MAX_ALIKE_CHARS

LINE, PREVIOUS, TOKENS = "line", "previous", "tokens"
FILE, REPOSITORY = "file", "repository"
MAX_MATCH_TOKENS = 8
MIN_MATCH_TOKENS = 2
# How far back a token match reads: MAX_MATCH_TOKENS tokens of ordinary code fit.
MATCH_CHARS = 160
REPEATS_SPAN = 50_000  # the file's lines read around the cursor
MAX_CANDIDATES = 24
# Another file's occurrences looked at: the file's own are worth more, and 64 files are read.
REPOSITORY_OCCURRENCES = 16

# A matcher's find: (source, tokens matched, offset of the place, the line's rest there).
Hit = tuple[str, int, int, str]

_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class Candidate:
    text: str  # what would follow the cursor, to the end of its line
    sources: tuple[str, ...]  # the matchers that found it: LINE, PREVIOUS, TOKENS
    where: str  # FILE or REPOSITORY
    match: int  # TOKENS: the tokens matched before the cursor; the others: 0
    count: int  # how many places hold it (all matchers)
    distance: int  # characters from the cursor in the file; the file's rank in the repository


@dataclass(frozen=True)
class Cursor:
    """The cursor's place as the matchers read it."""

    before: str  # the cursor's line up to the cursor, after its indentation
    after: str  # the rest of the cursor's line
    previous: str  # the previous non-blank line, stripped
    tail: tuple[str, ...]  # the last MAX_MATCH_TOKENS tokens before the cursor
    key: str  # the text of the last two tokens, as written (the last alone across a line end)
    trailing: str  # the whitespace between the last token and the cursor, on its line

    @property
    def line_start(self) -> bool:
        return not self.before.strip()


def line_tokens(line_prefix: str) -> int:
    """How many tokens the cursor's line holds before the cursor: a token match at least as
    long covers the line's beginning, as an alike line does."""
    return len(_TOKEN.findall(line_prefix))


def cursor_at(text: str, offset: int) -> Cursor:
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    line_prefix = text[start:offset]
    previous = ""
    at = start - 1
    while at > 0 and not previous:
        line_start = text.rfind("\n", 0, at) + 1
        previous, at = text[line_start:at].strip(), line_start - 1
    head = text[max(0, offset - MATCH_CHARS):offset]
    spans = list(_TOKEN.finditer(head))[-MAX_MATCH_TOKENS:]
    key = ""
    if len(spans) >= 2:
        joined = head[spans[-2].start():spans[-1].end()]
        key = spans[-1].group() if "\n" in joined else joined
    return Cursor(line_prefix.lstrip(), text[offset:len(text) if end < 0 else end], previous,
                  tuple(m.group() for m in spans), key,
                  line_prefix[len(line_prefix.rstrip(" \t")):])


def candidates(text: str, offset: int, repository: RepositoryContext | None = None,
               limit: int = MAX_CANDIDATES) -> tuple[Candidate, ...]:
    """The candidates at `offset` of `text`, best first (`rank`), at most `limit`."""
    cursor = cursor_at(text, offset)
    found: dict[str, Candidate] = {}
    _add(found, file_candidates(text, offset, cursor))
    if repository is not None and repository.choices:
        for near, path in enumerate(repository.index.nearest(repository.path)):
            if len(found) >= 2 * limit:
                break  # a common beginning (`self.`): the nearest files have said enough
            entry = repository.index.get(path)
            if entry is not None:
                _add(found, matches(entry.text, cursor, REPOSITORY, near, None,
                                    REPOSITORY_OCCURRENCES))
    return tuple(sorted(found.values(), key=rank)[:limit])


def rank(candidate: Candidate) -> tuple:
    """The order candidates are offered in: the file's before the repository's, a longer
    token match first, then the most held, then the nearest."""
    return (candidate.where != FILE, -candidate.match, -candidate.count, candidate.distance)


def file_candidates(text: str, offset: int, cursor: Cursor) -> list[Candidate]:
    """The file's candidates, from its lines within REPEATS_SPAN of the cursor; distances in
    characters from the cursor."""
    low, high = max(0, offset - REPEATS_SPAN), min(len(text), offset + REPEATS_SPAN)
    low = 0 if low == 0 else text.find("\n", low) + 1  # whole lines only
    high = len(text) if high == len(text) else text.rfind("\n", 0, high)
    window = text[low:max(low, high)]
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end < 0 else line_end
    # The cursor's line, blanked: no matcher reads it, and the other lines keep their places.
    skip = (line_start - low, line_end - low)
    window = window[:skip[0]] + " " * (skip[1] - skip[0]) + window[skip[1]:]
    return [_with_distance(c, abs(c.distance - (offset - low)))
            for c in matches(window, cursor, FILE, 0, skip, RETRIEVAL_OCCURRENCES)]


def matches(text: str, cursor: Cursor, where: str, distance: int,
            skip: tuple[int, int] | None, occurrences: int) -> list[Candidate]:
    """Every matcher's candidates in `text` (where FILE: `distance` is replaced by each
    place's offset in `text`; `skip` is the cursor's own line)."""
    found: dict[tuple[int, str], Candidate] = {}  # a place two matchers find counts once
    for source, match, at, rest in (*_line_matches(text, cursor, occurrences),
                                    *_token_matches(text, cursor, occurrences)):
        if skip is not None and skip[0] <= at <= skip[1]:
            continue
        rest = _rest(rest, cursor)
        if rest is None:
            continue
        line = text.rfind("\n", 0, at)
        old = found.get((line, rest))
        sources = (source,) if old is None else _union(old.sources, (source,))
        found[(line, rest)] = Candidate(rest, sources, where, max(match, old.match if old else 0),
                                        1, at if where == FILE else distance)
    return list(found.values())


def _line_matches(text: str, cursor: Cursor, occurrences: int) -> Iterable[Hit]:
    """LINE and PREVIOUS: the rests of the lines that begin with `before`."""
    if cursor.line_start:
        yield from _following_lines(text, cursor.previous, occurrences)
        return
    start = 0
    for _ in range(occurrences):
        at = text.find(cursor.before, start)
        if at < 0:
            return
        start = at + 1
        line_start = text.rfind("\n", 0, at) + 1
        if text[line_start:at].strip(" \t"):
            continue  # in the middle of a line
        end = text.find("\n", at)
        rest = text[at + len(cursor.before):len(text) if end < 0 else end]
        yield LINE, 0, at, rest
        if cursor.previous and _previous_line(text, line_start) == cursor.previous:
            yield PREVIOUS, 0, at, rest


def _following_lines(text: str, previous: str, occurrences: int) -> Iterable[Hit]:
    """At a line's start: the lines that follow a line equal to `previous`."""
    if not previous:
        return
    start = 0
    for _ in range(occurrences):
        at = text.find(previous, start)
        if at < 0:
            return
        start = at + 1
        line_start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        if end < 0:
            return
        if text[line_start:end].strip() != previous:
            continue
        yield PREVIOUS, 0, end + 1, _line_after(text, end)


def _token_matches(text: str, cursor: Cursor, occurrences: int) -> Iterable[Hit]:
    """TOKENS: the places whose last tokens match the cursor's last 2 or more, with what
    follows them to their line's end (at a line's start: the next line)."""
    if len(cursor.tail) < MIN_MATCH_TOKENS:
        return
    key = cursor.key
    start = 0
    for _ in range(occurrences):
        at = text.find(key, start)
        if at < 0:
            return
        start = at + 1
        end = at + len(key)
        if ((_is_word(key[0]) and at > 0 and _is_word(text[at - 1]))
                or (_is_word(key[-1]) and end < len(text) and _is_word(text[end]))):
            continue
        matched = _matched_tokens(text, end, cursor.tail)
        if matched < MIN_MATCH_TOKENS:
            continue
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        if cursor.line_start:
            if text[end:line_end].strip():
                continue  # the match is not at its line's end
            rest = _line_after(text, line_end)
            end = line_end + 1  # the place is the following line, as PREVIOUS finds it
        else:
            rest = text[end:line_end]
            if not rest.startswith(cursor.trailing):
                continue
            rest = rest[len(cursor.trailing):]
        yield TOKENS, matched, end, rest


def _line_after(text: str, newline: int) -> str:
    """The line after the line end at `newline`, without its indentation."""
    following_end = text.find("\n", newline + 1)
    return text[newline + 1:len(text) if following_end < 0 else following_end].lstrip()


def _matched_tokens(text: str, end: int, tail: tuple[str, ...]) -> int:
    """How many of `tail`'s last tokens the tokens of `text` ending at `end` match."""
    before = _TOKEN.findall(text[max(0, end - MATCH_CHARS):end])
    matched = 0
    for mine, theirs in zip(reversed(tail), reversed(before), strict=False):
        if mine != theirs:
            break
        matched += 1
    return matched


def _previous_line(text: str, line_start: int) -> str:
    """The non-blank line before the line starting at `line_start`, stripped."""
    at = line_start - 1
    while at > 0:
        start = text.rfind("\n", 0, at) + 1
        line = text[start:at].strip()
        if line:
            return line
        at = start - 1
    return ""


def _rest(rest: str, cursor: Cursor) -> str | None:
    """The candidate a line's `rest` gives: without the cursor line's own end (`after`),
    not blank, not too long; None where it does not end as the cursor's line does."""
    after = cursor.after.rstrip()
    rest = rest.rstrip()
    if after:
        if not rest.endswith(after) or len(rest) == len(after):
            return None
        rest = rest[:len(rest) - len(after)]
    if not rest.strip() or len(rest) > MAX_ALIKE_CHARS:
        return None
    return rest


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _with_distance(candidate: Candidate, distance: int) -> Candidate:
    return Candidate(candidate.text, candidate.sources, candidate.where, candidate.match,
                     candidate.count, distance)


def _union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(s for s in (LINE, PREVIOUS, TOKENS) if s in a or s in b)


def _add(found: dict[str, Candidate], new: Iterable[Candidate]) -> None:
    """Merge `new` into `found` by text: counts add up; the strongest evidence is kept."""
    for candidate in new:
        old = found.get(candidate.text)
        if old is None:
            found[candidate.text] = candidate
            continue
        best = min(old, candidate, key=rank)
        found[candidate.text] = Candidate(
            best.text, _union(old.sources, candidate.sources), best.where,
            max(old.match, candidate.match),
            old.count + candidate.count, min(old.distance, candidate.distance)
            if old.where == candidate.where else best.distance)
