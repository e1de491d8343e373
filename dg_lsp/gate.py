"""The confidence gate: what the model is not sure of is not shown.

The engine scores every completion it commits (engine.types.Score: the confidences of its
generated tokens, a by-product of the passes run), in process and resident alike, so both
gate the same. A completion or edit whose least confident token is below the
`minConfidence` setting is not offered: no ghost text, no list item, and a code action is
refused with the reason. A draft without a score (an engine that predates it, a family that
records none) is shown as it would be without the gate. README, "Confidence gate", has the
measured curve the default comes from.
"""

from __future__ import annotations

from engine.types import Score


def refusal(score: Score | None, min_confidence: float) -> str | None:
    """Why a completion or edit scored `score` is not shown, or None: it is."""
    if score is None or min_confidence <= 0 or score.lowest >= min_confidence:
        return None
    return (f"the model is not confident in this edit "
            f"({score.lowest:.2f} < {min_confidence:.2f})")
