"""The model as the judge of the candidates the file and the repository hold at the cursor
(dg_lsp.repository.candidates).

The engine scores every candidate in one pass (InfillRequest.judge: the log-probability of
each of its tokens where it would stand in the hole, then of the hole ending after it). A
logistic fit (`Calibrator`, judge.json, written by dg_lsp.measure.judge_fit on the tune half of
the held-out cursors, dg_lsp.measure.eval.retrieval) turns those scores and the retrieval's
evidence (where the candidate was found, by which matcher, how long its token match, how many
places hold it, how near) into the probability that the candidate is exactly what the user
goes on to type. The most probable candidate is shown when that probability reaches the
threshold of its cursor (a line's start has its own: what the previous lines predict is right
less often than what a begun line's beginning does); else the model writes the hole itself.
A pick below the `sure` threshold waits for that writing and yields to it where the gate
shows it (in the example stack's pop method the push method's line is a token match of the
cursor's, and the model writes the pop call itself).
The probability is the completion's confidence: the gate reads it as it reads the
calibrator's for a written one.

A family that cannot score in one pass (the autoregressive baseline, the block family)
returns no scores: its candidates are judged on the evidence alone (the model's inputs set to
their means).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from dg_lsp.document.gate import Calibrator
from dg_lsp.repository.candidates import FILE, LINE, MAX_MATCH_TOKENS, PREVIOUS, TOKENS, Candidate
from dg_lsp.settings import DEFAULT_MIN_CONFIDENCE

JUDGE_FILE = Path(__file__).with_name("judge.json")
# The model's scores, how each compares with the best of the cursor's candidates (picking is
# choosing among them), and how far below the model's own first pick at each position its
# tokens are.
MODEL_FEATURES = ("mean_logprob", "first_logprob", "lowest_logprob", "end_logprob",
                  "log_tokens", "mean_margin", "first_margin", "mean_gap", "first_gap")
FEATURES = (*MODEL_FEATURES, "file", "line", "previous", "tokens", "match", "covers_line",
            "log_count", "log_distance", "first", "log_candidates", "line_start")


@dataclass(frozen=True)
class Judge:
    calibrator: Calibrator
    threshold: float  # a mid-line cursor's candidate is shown at this probability
    line_start_threshold: float  # a line start's
    # Below these, a pick yields to what the model writes itself where the gate shows that.
    sure_threshold: float = 0.0
    line_start_sure_threshold: float = 0.0

    def sure(self, probability: float, line_start: bool) -> bool:
        """Whether a pick is shown at once, not only where the model's own writing is not."""
        return probability >= (self.line_start_sure_threshold if line_start
                               else self.sure_threshold)

    def probabilities(self, candidates: Sequence[Candidate],
                      logprobs: Sequence[Sequence[float]], line_start: bool,
                      top: Sequence[float] = (), tokens: int = 0) -> list[float]:
        """Each candidate's probability of being right, given the engine's `logprobs` (as
        many as the candidates, or none: the family scores none), `top` (its highest at
        each hole position) and the `tokens` of the cursor's line before it (`line_tokens`)."""
        means = list(self.calibrator.mean[:len(MODEL_FEATURES)])
        scored = all_model_inputs(logprobs if logprobs else [()] * len(candidates), top)
        return [self.calibrator.probability(
                    (model or means) + evidence_inputs(c, i, len(candidates), line_start,
                                                       tokens))
                for i, (c, model) in enumerate(zip(candidates, scored, strict=True))]

    def pick(self, candidates: Sequence[Candidate], logprobs: Sequence[Sequence[float]],
             line_start: bool, top: Sequence[float] = (), tokens: int = 0
             ) -> tuple[Candidate, float] | None:
        """The candidate to show and its probability, or None: the model writes the hole."""
        if not candidates:
            return None
        chances = self.probabilities(candidates, logprobs, line_start, top, tokens)
        best = max(range(len(candidates)), key=lambda i: chances[i])
        threshold = self.line_start_threshold if line_start else self.threshold
        return (candidates[best], chances[best]) if chances[best] >= threshold else None


    def hides(self, probability: float, line_start: bool, min_confidence: float) -> bool:
        """Whether the gate hides a pick of `probability` at the user's `minConfidence`."""
        return probability < self.gate_threshold(line_start, min_confidence)

    def gate_threshold(self, line_start: bool, min_confidence: float) -> float:
        """The probability below which the gate hides a pick: the judge's threshold at the
        default `minConfidence`, raised or lowered in proportion to it."""
        threshold = self.line_start_threshold if line_start else self.threshold
        return threshold * min_confidence / DEFAULT_MIN_CONFIDENCE


def all_model_inputs(logprobs: Sequence[Sequence[float]], top: Sequence[float] = ()
                     ) -> list[list[float]]:
    """The model's inputs (MODEL_FEATURES) of each of a cursor's candidates, from the engine's
    scores of each (its tokens' log-probabilities, then the end's) and `top` (the highest at
    each position; () from an engine that sends none: no gap); [] for one it could not
    score (longer than the hole, or a family that scores none): the caller puts the
    inputs' means there."""
    own = [_own_inputs(scores) if scores else [] for scores in logprobs]
    if not any(own):
        return own
    best_mean = max(x[0] for x in own if x)
    best_first = max(x[1] for x in own if x)
    return [x + [x[0] - best_mean, x[1] - best_first, *_gaps(scores, top)] if x else []
            for x, scores in zip(own, logprobs, strict=True)]


def _own_inputs(logprobs: Sequence[float]) -> list[float]:
    tokens, end = logprobs[:-1], logprobs[-1]
    return [sum(tokens) / len(tokens), tokens[0], min(tokens), end, math.log(len(tokens))]


def _gaps(logprobs: Sequence[float], top: Sequence[float]) -> list[float]:
    """The mean and the first of how far each token is below the model's pick there."""
    tokens = logprobs[:-1]
    if len(top) < len(tokens):
        return [0.0, 0.0]
    gaps = [t - best for t, best in zip(tokens, top, strict=False)]
    return [sum(gaps) / len(gaps), gaps[0]]


def evidence_inputs(candidate: Candidate, rank: int, count: int, line_start: bool,
                    tokens: int = 0) -> list[float]:
    """The retrieval's evidence for a candidate, the `rank`th of `count`, at a cursor whose
    line holds `tokens` before it: whether its match covers the line's beginning (a token
    match of an attribute's last names continues a return statement less surely than a line
    that began with the same return does)."""
    covers = (LINE in candidate.sources or PREVIOUS in candidate.sources
              or candidate.match >= tokens)
    return [float(candidate.where == FILE), float(LINE in candidate.sources),
            float(PREVIOUS in candidate.sources), float(TOKENS in candidate.sources),
            candidate.match / MAX_MATCH_TOKENS, float(covers), math.log(candidate.count),
            math.log1p(candidate.distance), float(rank == 0), math.log(count),
            float(line_start)]


@cache
def judge(path: Path = JUDGE_FILE) -> Judge:
    data = json.loads(path.read_text(encoding="utf-8"))
    return Judge(Calibrator.from_json(data, FEATURES), float(data["threshold"]),
                 float(data["line_start_threshold"]), float(data["sure_threshold"]),
                 float(data["line_start_sure_threshold"]))
