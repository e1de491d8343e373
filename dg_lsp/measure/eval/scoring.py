"""How a completion is compared with the true middle of a hole.

Definitions (the same for every model, baselines included):

- Exact match: the two texts are equal after whitespace normalization, i.e. after every run of
  whitespace (spaces, tabs, newlines) is collapsed to one space and both ends are stripped.
  Indentation therefore does not count; token content and order do.
- Edit similarity: 1 - levenshtein(a, b) / max(len(a), len(b)) over the raw characters (no
  normalization), where levenshtein counts single-character insertions, deletions and
  substitutions. Two empty texts have similarity 1.0.
- Single-line holes: the true middle is one whole line including its newline (HumanEval's
  single-line rows are cut that way, and so are our own single-line cases). A completion for such
  a hole is cut at its first newline and one newline is put back (`single_line`), in both
  hole-length protocols and for every predictor, so nothing is credited or punished for what it
  writes past the line.
"""

from __future__ import annotations

from engine.data.stats import edit_similarity, levenshtein  # noqa: F401 - the definitions above


def normalize_whitespace(text: str) -> str:
    return " ".join(text.split())


def exact_match(completion: str, reference: str) -> bool:
    return normalize_whitespace(completion) == normalize_whitespace(reference)


def single_line(completion: str) -> str:
    """A single-line hole's completion: everything before the first newline, plus a newline."""
    return completion.split("\n", 1)[0] + "\n"
