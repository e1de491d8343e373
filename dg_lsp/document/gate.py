"""The confidence gate: what the model is not sure of is not shown.

The engine scores every completion it commits (engine.types.Score: the confidences of its
generated tokens, a by-product of the passes run), in process and resident alike, so both
gate the same. A draft without a score (a family that records none) is shown as it would be
without the gate.

Completions (`hides`, the `minConfidence` setting): the server turns the Score and what it
knows when it decides (the hole kind, the suggestion after post-processing: `features`) into
the probability that the suggestion is close to right (edit similarity at least 0.7 to what
the user goes on to write) with `Calibrator`, a logistic regression of seven weights fitted on
the bundled model's completions at training-corpus cursors (dg_lsp.measure.gate_fit,
gate_calibrator.json), and does not show one below `minConfidence`: no ghost text, no list
item. On held-out cursors it keeps better suggestions than the least confident token alone at
the same share shown (docs/usage.md, "Confidence gate", has the curves and the rule the
default comes from).

Edits (`refusal`, `minEditConfidence`: code actions, rewrites, batch, next edits): the least
confident token, refused with the reason; the calibrator has seen no edit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from engine.types import Score

CALIBRATOR_FILE = Path(__file__).with_name("gate_calibrator.json")

# The calibrator's inputs, in order (`features`). Tried and left out (no better
# cross-validated log loss on the training cursors; scripts/experiments/gate_features.py):
# what precedes the cursor on its line (`=`, `(`, `.`, `,`, `:`, a keyword, the line start),
# passes per token, a brackets hole, whether the engine stopped at the unit's end, whether
# the completed line repeats one of the file as a whole (docs/usage.md: no gain on held-out
# cursors; `repeated` is narrower: the text is another line's at the same place).
FEATURES = ("lowest", "mean", "log_tokens", "block", "log_chars", "lines", "repeated")
# A whole new line is gated at this share of minConfidence. The calibrator gives line starts
# lower probabilities than mid-line cursors (they are right less often), so one threshold hid
# nearly all of them; at half of it they are shown at least a fifth of the time on each
# held-out package while what is shown stays as often exactly right overall (docs/usage.md,
# "Confidence gate"; scripts/experiments/gate_packages.py).
LINE_START_SHARE = 0.5


def refusal(score: Score | None, min_confidence: float) -> str | None:
    """Why an edit scored `score` is not offered, or None: it is."""
    if score is None or min_confidence <= 0 or score.lowest >= min_confidence:
        return None
    return (f"the model is not confident in this edit "
            f"({score.lowest:.2f} < {min_confidence:.2f})")


def features(score: Score, hole: str, text: str, repeated: bool) -> list[float]:
    """The calibrator's inputs (FEATURES) for a completion scored `score` in a hole of kind
    `hole` (dg_lsp.context HOLE_KINDS) whose suggestion, after post-processing, is `text`:
    the least and the mean confidence, log(1 + tokens scored), whether the hole is a block,
    log(1 + characters) and the newlines of the suggestion, and whether it is what another
    line of the file holds at the same place (Context.repeats: the model chose it there, and
    its Score is that of the choice, a token or two)."""
    return [score.lowest, score.mean, math.log1p(score.tokens), float(hole == "block"),
            math.log1p(len(text)), float(text.count("\n")), float(repeated)]


def confidence(score: Score, hole: str, text: str, repeated: bool) -> float:
    """The calibrator's probability that the suggestion `text` is close to right."""
    return calibrator().probability(features(score, hole, text, repeated))


def is_line_start(line_prefix: str, hole: str) -> bool:
    """Whether the suggestion is a line of its own: the cursor at a line's start (only
    indentation before it) or after a block's header (the hole is the block)."""
    return not line_prefix.strip() or hole == "block"


def threshold(min_confidence: float, line_start: bool) -> float:
    """The probability below which a suggestion is hidden: `min_confidence`, and for a line
    start LINE_START_SHARE of it."""
    return min_confidence * (LINE_START_SHARE if line_start else 1.0)


def hides(confidence: float | None, min_confidence: float, line_start: bool = False) -> bool:
    """Whether a completion of `confidence` (see `confidence`; None: unscored, as a family
    that records no score answers) is not shown: below the `threshold` (`line_start`:
    is_line_start)."""
    if confidence is None or min_confidence <= 0:
        return False
    return confidence < threshold(min_confidence, line_start)


@dataclass(frozen=True)
class Calibrator:
    """p(right) = sigmoid(bias + sum(weight * (x - mean) / std)) over FEATURES."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    weight: tuple[float, ...]
    bias: float

    def probability(self, x: list[float]) -> float:
        z = self.bias + sum(w * (v - m) / s for v, m, s, w
                            in zip(x, self.mean, self.std, self.weight, strict=True))
        return 1 / (1 + math.exp(-z)) if z > -700 else 0.0

    def to_json(self, features: tuple[str, ...] = FEATURES, **meta: Any) -> dict[str, Any]:
        return {"features": list(features), "mean": list(self.mean), "std": list(self.std),
                "weight": list(self.weight), "bias": self.bias, **meta}

    @classmethod
    def from_json(cls, data: dict[str, Any], features: tuple[str, ...] = FEATURES
                  ) -> Calibrator:
        """The calibrator `data` holds, over `features` (the gate's, or the judge's:
        dg_lsp.completion.judge)."""
        if data.get("features") != list(features):
            raise ValueError(f"calibrator features {data.get('features')} are not {features}")
        return cls(tuple(map(float, data["mean"])), tuple(map(float, data["std"])),
                   tuple(map(float, data["weight"])), float(data["bias"]))


@cache
def calibrator(path: Path = CALIBRATOR_FILE) -> Calibrator:
    return Calibrator.from_json(json.loads(path.read_text(encoding="utf-8")))
