"""Trivial predictors every model must beat; they see the same prefix and suffix as a model."""

from __future__ import annotations


def predict_empty(prefix: str, suffix: str) -> str:
    return ""


def predict_copy_prev_line(prefix: str, suffix: str) -> str:
    """The last complete line of the prefix, newline included ("" when there is none).

    At a line start (single- and multi-line holes) that is the line just above the hole; inside a
    line it is the line above the cursor's line.
    """
    complete = prefix[: prefix.rfind("\n") + 1]
    if not complete:
        return ""
    previous_start = complete.rfind("\n", 0, len(complete) - 1) + 1
    return complete[previous_start:]


BASELINES = {
    "empty": predict_empty,
    "copy-prev-line": predict_copy_prev_line,
}
