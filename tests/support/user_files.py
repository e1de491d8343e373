"""Files as users have them, for the tests of `dg-lsp rewrite` and `dg-lsp batch` on them
(dg_lsp.files): every line-ending style, and a model that writes the same docstring."""

from __future__ import annotations

from pathlib import Path

from dg_lsp.cli import main
from tests.support.scripted import Scripted

# (name, the file, the file after a docstring for area()): every ending style, with a BOM.
CASES = [
    ("lf", b"def area(r):\n    return 3 * r * r\n",
     b'def area(r):\n    """Doc."""\n    return 3 * r * r\n'),
    ("crlf", b"def area(r):\r\n    return 3 * r * r\r\n",
     b'def area(r):\r\n    """Doc."""\r\n    return 3 * r * r\r\n'),
    ("cr", b"def area(r):\r    return 3 * r * r\r",
     b'def area(r):\r    """Doc."""\r    return 3 * r * r\r'),
    # Mixed: CRLF is the most frequent, so the new line gets it; the LF lines stay LF.
    ("mixed", b"def area(r):\r\n    return 3 * r * r\r\n\n\nx = 1\r\n",
     b'def area(r):\r\n    """Doc."""\r\n    return 3 * r * r\r\n\n\nx = 1\r\n'),
    ("mixed-lf", b"def area(r):\n    return 3 * r * r\r\n\n\nx = 1\n",
     b'def area(r):\n    """Doc."""\n    return 3 * r * r\r\n\n\nx = 1\n'),
    ("bom-crlf", b"\xef\xbb\xbfdef area(r):\r\n    return 3 * r * r\r\n",
     b'\xef\xbb\xbfdef area(r):\r\n    """Doc."""\r\n    return 3 * r * r\r\n'),
    ("crlf-no-final-newline", b"def area(r):\r\n    return 3 * r * r",
     b'def area(r):\r\n    """Doc."""\r\n    return 3 * r * r'),
]
IDS = [name for name, _, _ in CASES]


class Docstrings(Scripted):
    """Writes "Doc." for every target; `during` runs while the model "runs"."""

    def __init__(self, during=None) -> None:
        super().__init__()
        self.during = during

    def _drafts(self):
        if self.during is not None:
            self.during()
        self.texts.append("Doc.")
        return super()._drafts()


def rewrite(path: Path, *args: str) -> int:
    return main(["rewrite", str(path), "--range", "1:1-1:1", "--action", "docstring", *args])


def batch(path: Path, *args: str) -> int:
    return main(["batch", str(path), "--action", "docstrings", "--engine", "inproc", *args])
