"""Code actions' targets in a parsed text, without a model, and two small files with a target
of each kind (a stub, a definition with no docstring, a syntax error, a selection)."""

from __future__ import annotations

from dg_lsp.actions.targets import REWRITE, targets_at
from dg_lsp.document.parsed import ParsedText
from dg_lsp.syntax.languages import language_for

# A function with a stub, a TODO beside code (not a hole) and a marked `pass`: two holes.
MEAN = ("def mean(xs):\n"
        "    total = 0\n"
        "    ...\n"
        "    n = len(xs)  # TODO not alone: no hole\n"
        "    pass  # TODO: return the mean\n")


def doc(text: str, language: str = "python") -> ParsedText:
    return ParsedText(text, language_for(language))


def target_of(d: ParsedText, start: int, end: int, action: str = REWRITE):
    (target,) = [t for t in targets_at(d, start, end) if t.action == action]
    return target


PY = '''import json


def load_config(path):
    with open(path) as f:
        return json.load(f)


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def norm(self):
        """Return the length of the vector."""
        ...


x = (1 + 2
print(x)
'''

JS = '''function add(a, b) {
  return a + b;
}

function square(x) {
  return x * x;
}

function half(a) {
  return a +;
}

class Counter {
  increment() {
    // TODO
  }
}
'''
