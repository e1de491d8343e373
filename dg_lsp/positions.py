"""LSP positions ⇄ character offsets: the one place lines and columns are counted.

LSP lines end at `\\n`, `\\r\\n` and `\\r` only. Python's `str.splitlines` (and so pygls's
document model) also splits at form feed, `\\x0b`, `\\x1c`-`\\x1e`, `\\x85`, `\\u2028` and
`\\u2029`; counting lines that way puts every position after such a character on the wrong
text. Columns count code units of the negotiated encoding: UTF-16 (the LSP default), UTF-8
bytes or UTF-32 code points (= Python characters).

A lone surrogate (which JSON can carry) counts as one UTF-16 unit and three UTF-8 bytes, as
an editor that stores the text in UTF-16 counts it, so the server's copy of such a document
stays in step with the client's.

Every function costs what a scan of the text in C costs, never a Python loop over lines or
characters: a position in a 10 MB file converts in milliseconds.
"""

from __future__ import annotations

import re

import numpy as np
from lsprotocol import types

UTF8 = types.PositionEncodingKind.Utf8
UTF16 = types.PositionEncodingKind.Utf16
UTF32 = types.PositionEncodingKind.Utf32

LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Lines are found by counting breaks a chunk at a time (str.count runs in C), then searching
# only the chunk that holds the wanted line.
_CHUNK = 1 << 16


def _breaks(text: str, start: int, end: int, has_cr: bool = True) -> int:
    """The number of LSP line breaks in text[start:end] (a `\\r\\n` counts once)."""
    newlines = text.count("\n", start, end)
    if not has_cr:
        return newlines
    return newlines + text.count("\r", start, end) - text.count("\r\n", start, end)


def line_start(text: str, line: int) -> int | None:
    """The offset where 0-based `line` starts; None past the last line.

    A text ending in a line break has an empty last line after it (its start is len(text)).
    """
    if line < 0:
        return None
    if line == 0:
        return 0
    seen, start, size = 0, 0, len(text)
    has_cr = "\r" in text  # most files have none: one count per chunk instead of three
    while start < size:
        end = min(size, start + _CHUNK)
        if end < size and text[end - 1] == "\r" and text[end] == "\n":
            end += 1  # never split a \r\n between two chunks: it would count twice
        count = _breaks(text, start, end, has_cr)
        if seen + count >= line:
            for match in LINE_BREAK.finditer(text, start, end):
                seen += 1
                if seen == line:
                    return match.end()
        seen += count
        start = end
    return None


def line_end(text: str, offset: int) -> int:
    """The offset of the line break ending the line that holds `offset` (or len(text))."""
    ends = [i for i in (text.find("\n", offset), text.find("\r", offset)) if i >= 0]
    return min(ends) if ends else len(text)


def line_of(text: str, offset: int) -> tuple[int, int]:
    """(0-based line, offset of that line's start) for character `offset`."""
    offset = max(0, min(offset, len(text)))
    start = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
    return _breaks(text, 0, offset), start


def units(text: str, encoding: str) -> int:
    """The length of `text` in code units of `encoding`."""
    if encoding == UTF32 or text.isascii():
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _unit_ends(line: str, encoding: str) -> np.ndarray:
    """For each character of `line`, the code units up to and including it."""
    points = np.frombuffer(line.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    if encoding == UTF8:
        widths = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)
    else:
        widths = 1 + (points >= 0x10000)
    return np.cumsum(widths, dtype=np.int64)


def column(line: str, count: int, encoding: str, clamp: bool = False) -> int | None:
    """The character index `count` code units into `line` (a line without its break).

    None when that is past the line's end or inside a character (half a UTF-16 surrogate
    pair, part of a UTF-8 sequence); with `clamp`, the nearest character boundary at or
    before it instead.
    """
    if count <= 0:
        return 0 if count == 0 or clamp else None
    if encoding == UTF32 or line.isascii():
        if count <= len(line):
            return count
        return len(line) if clamp else None
    ends = _unit_ends(line, encoding)
    whole = int(np.searchsorted(ends, count, side="right"))  # characters that end within
    if clamp or (whole > 0 and ends[whole - 1] == count):
        return whole
    return None


def offset_at(text: str, position: types.Position, encoding: str,
              clamp: bool = False) -> int | None:
    """The character offset of an LSP position; None when it is not in the text.

    With `clamp`, a position past a line's end is that end and one past the last line is
    the end of the text (as editors treat them), so the result is always an offset.
    """
    line, character = position.line, position.character
    if line < 0 or character < 0:
        return 0 if clamp else None
    start = line_start(text, line)
    if start is None:
        return len(text) if clamp else None
    end = line_end(text, start)
    col = column(text[start:end], character, encoding, clamp)
    return None if col is None else start + col


def position_at(text: str, offset: int, encoding: str) -> types.Position:
    """The LSP position of character `offset` (clamped to the text).

    An offset between the `\\r` and `\\n` of one line break is not a position in LSP; it maps
    to the start of the next line.
    """
    line, start = line_of(text, offset)
    offset = max(start, min(offset, len(text)))
    return types.Position(line, units(text[start:offset], encoding))


def range_at(text: str, start: int, end: int, encoding: str) -> types.Range:
    """The LSP range of characters [start, end)."""
    return types.Range(position_at(text, start, encoding), position_at(text, end, encoding))
