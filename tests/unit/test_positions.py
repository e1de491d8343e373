"""LSP positions: lines end at \\n, \\r\\n and \\r only, whatever str.splitlines thinks.

The expected values here are computed by `lsp_offset`, a direct reading of the LSP rule kept
apart from dg_lsp.positions, so a mistake in the module cannot agree with itself.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from lsprotocol import types

from dg_lsp.actions.targets import REWRITE
from dg_lsp.lsp.actions import rewrite
from dg_lsp.lsp.server import create_server
from dg_lsp.positions import UTF8, UTF16, UTF32, line_of, offset_at, position_at
from tests.support.scripted import Scripted

# Every character Python's splitlines splits at and LSP does not.
NOT_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
MIXED = ("import os\n\x0cdef f(a):\x0b  b = 'é🎉'\u2028\r\n  return a\x85\rx = 1\x1c\x1d\x1e"
         "\u2029\n\n")


def lsp_offset(text: str, line: int, character: int, encoding: str = UTF16) -> int:
    """The LSP rule, written out: split at the three breaks, count code units."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    start = starts[line]
    unit = {UTF16: "utf-16-le", UTF8: "utf-8", UTF32: "utf-32-le"}[encoding]
    width = {UTF16: 2, UTF8: 1, UTF32: 4}[encoding]
    count = 0
    for i, ch in enumerate(text[start:]):
        if count == character:
            return start + i
        count += len(ch.encode(unit)) // width
    return start + len(text[start:])


@pytest.mark.parametrize("encoding", [UTF16, UTF8, UTF32])
def test_every_offset_round_trips_and_lines_break_only_where_lsp_says(encoding):
    text = MIXED * 2
    assert len(text) >= 50
    for offset in range(len(text) + 1):
        if text[offset - 1:offset + 1] == "\r\n":
            continue  # between the two characters of one line break: not a position
        position = position_at(text, offset, encoding)
        assert offset_at(text, position, encoding) == offset
        assert lsp_offset(text, position.line, position.character, encoding) == offset
        # no character splitlines splits at ever starts a line
        assert position.line == len(re.findall(r"\r\n|\r|\n", text[:offset]))


def test_positions_past_a_line_or_inside_a_character_are_refused_or_clamped():
    text = "a\x0cb🎉c\nxy"
    assert offset_at(text, types.Position(0, 4), UTF16) is None  # inside the emoji's pair
    assert offset_at(text, types.Position(0, 4), UTF16, clamp=True) == 3  # before the emoji
    assert offset_at(text, types.Position(0, 99), UTF16) is None
    assert offset_at(text, types.Position(0, 99), UTF16, clamp=True) == text.index("\n")
    assert offset_at(text, types.Position(2, 0), UTF16) is None
    assert offset_at(text, types.Position(9, 0), UTF16, clamp=True) == len(text)
    assert line_of(text, len(text)) == (1, text.index("x"))


def test_a_lone_surrogate_counts_as_the_client_counts_it():
    text = "a\ud800b\nc"
    assert offset_at(text, types.Position(0, 2), UTF16) == 2
    assert offset_at(text, types.Position(0, 4), UTF8) == 2  # three bytes, as surrogatepass
    assert position_at(text, 3, UTF16) == types.Position(0, 3)


def test_a_deep_line_of_a_ten_megabyte_file_converts_quickly():
    import time

    text = "def f(x):\n    return x\n\n" * (10 * 1024 * 1024 // 24)
    line = text.count("\n") - 2
    started = time.perf_counter()
    offset = offset_at(text, types.Position(line, 4), UTF16)
    assert position_at(text, offset, UTF16) == types.Position(line, 4)
    assert time.perf_counter() - started < 0.5  # milliseconds here; a Python line loop: seconds
    assert text[offset:offset + 6] == "return"


# -- the server's copy of a document --------------------------------------------------------


def open_in(server, text: str, uri: str = "file:///tmp/area.py") -> str:
    server.did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


def type_at(server, uri: str, version: int, line: int, character: int, new: str) -> None:
    at = types.Position(line, character)
    server.did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        [types.TextDocumentContentChangePartial(range=types.Range(at, at), text=new)]))


def test_a_keystroke_after_a_form_feed_line_keeps_the_copy_identical_to_the_clients():
    server = create_server()
    text = "import os\n\x0c\ndef area(width, height):\n    return \n"
    uri = open_in(server, text)
    # the client types "w" at line 2, character 10 (after "def area(w")
    type_at(server, uri, 2, 2, 10, "w")
    expected = "import os\n\x0c\ndef area(wwidth, height):\n    return \n"
    assert server.documents.get(uri).text == expected
    # the kept tree follows the same text (no fresh parse needed)
    assert server.trees.text(uri) == expected
    for separator in NOT_BREAKS:
        uri = open_in(server, f"a{separator}b\nc", f"file:///tmp/{ord(separator)}.py")
        type_at(server, uri, 2, 1, 0, "X")
        assert server.documents.get(uri).text == f"a{separator}b\nXc"


def test_a_rewrite_of_lines_after_a_form_feed_edits_those_lines():
    text = "import os\n\x0c\ndef area(width, height):\n    return \n"
    rewritten = "def area(width, height):\n    return width * height\n"
    server = create_server(Scripted(*[rewritten] * 4))
    uri = open_in(server, text)
    lines_2_to_3 = types.Range(types.Position(2, 0), types.Position(4, 0))
    edit = asyncio.run(rewrite(server, uri, 1, lines_2_to_3, REWRITE, strength=1.0))
    (change,) = edit.document_changes
    (text_edit,) = change.edits
    start = lsp_offset(text, text_edit.range.start.line, text_edit.range.start.character)
    end = lsp_offset(text, text_edit.range.end.line, text_edit.range.end.character)
    new = text[:start] + text_edit.new_text + text[end:]
    # the selection's trailing blank is kept as the rewrite found it
    assert new == "import os\n\x0c\ndef area(width, height):\n    return width * height \n"
