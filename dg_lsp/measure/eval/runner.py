"""Runs predictors (models and baselines) over infill cases and sums up quality and speed.

Hole-length protocols:
- oracle: the hole holds exactly as many tokens as the true middle has under the model's own
  tokenizer, and the model may not end early (`stop_early=False`); an empty middle is answered with
  an empty completion and no model call.
- fixed: the hole size depends only on the hole kind (`DEFAULT_HOLE_TOKENS`), and the model must
  end the hole itself with EOS/pad (`stop_early=True`).
Baselines ignore the hole size, so their numbers are the same under both protocols. The canvas is
`canvas_length` tokens (256, as in the editor), widened for a hole that would leave fewer than
`MIN_CONTEXT_TOKENS` of context (long oracle middles).

Completions are scored as the engine returns them, plus the single-line rule of `scoring`; the
language server's post-processing is not applied, so the model is measured, not the post-processor.

Speed, per model and protocol: forward passes per case (mean of `InfillResult.steps`), tokens per
forward (all completion tokens / all forward passes), and wall-clock latency of the infill call,
p50 and p95 by nearest rank. Each model gets one untimed warm-up call first.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from dg_lsp.measure.eval.baselines import BASELINES
from dg_lsp.measure.eval.sandbox import check_completion
from dg_lsp.measure.eval.scoring import edit_similarity, exact_match, single_line
from engine.data.cases import Case
from engine.data.stats import percentile
from engine.types import CANVAS_LENGTH

PROTOCOLS = ("oracle", "fixed")
DEFAULT_HOLE_TOKENS = {"single-line": 32, "multi-line": 128, "random-span": 64}
BUNDLED = "bundled"
# A hole too long for the canvas (long oracle middles) widens the canvas to keep this much context.
MIN_CONTEXT_TOKENS = 64


@dataclass
class Prediction:
    text: str
    steps: int  # forward passes of the model (0 for baselines)
    tokens: int  # tokens of the completion (0 for baselines: they have no tokenizer)
    finish_reason: str


class Predictor:
    """Something that fills a hole: a baseline function or a loaded engine."""

    def __init__(self, name: str, fill: Callable[[Case, str], Prediction]) -> None:
        self.name = name
        self.fill = fill

    @classmethod
    def baseline(cls, name: str) -> Predictor:
        predict = BASELINES[name]
        return cls(name, lambda case, protocol: Prediction(
            predict(case.prefix, case.suffix), 0, 0, "baseline"))

    @classmethod
    def engine(
        cls,
        name: str,
        engine: Any,
        settings: Any,
        hole_tokens: dict[str, int],
        canvas_length: int = CANVAS_LENGTH,
    ) -> Predictor:
        def fill(case: Case, protocol: str) -> Prediction:
            if protocol == "oracle":
                size = len(engine.tokenizer.encode(case.middle))
                if size == 0:
                    return Prediction("", 0, 0, "empty-middle")
            else:
                size = hole_tokens[case.kind]
            result = engine.infill(
                case.prefix, case.suffix, max_tokens=size, settings=settings,
                stop_early=protocol == "fixed",
                canvas_length=max(canvas_length, size + MIN_CONTEXT_TOKENS),
            )
            return Prediction(result.text, result.steps, result.tokens, result.finish_reason)

        return cls(name, fill)

    @classmethod
    def backend(
        cls,
        name: str,
        backend: Any,
        settings: Any,
        hole_tokens: dict[str, int],
        canvas_length: int = CANVAS_LENGTH,
    ) -> Predictor:
        """A model behind engine.backend.Backend (a team's engine by URL): the fixed protocol
        only (the oracle one counts the middle's tokens with the model's tokenizer and forbids
        early stops, which only an engine in this process offers). Each case is the request
        Engine.infill makes of the same arguments, so the numbers compare with a local run."""
        from engine.types import InfillRequest, last_draft

        def fill(case: Case, protocol: str) -> Prediction:
            if protocol != "fixed":
                raise ValueError(f"{name} runs the fixed protocol only, not {protocol}")
            size = hole_tokens[case.kind]
            request = InfillRequest(case.prefix, case.suffix, size, settings,
                                    max(canvas_length, size + MIN_CONTEXT_TOKENS))
            last = last_draft(backend.infill_stream(request))
            if last is None:
                raise ValueError(f"{name} answered no draft")
            tokens = (len(backend.completion_ids(last)) if backend.engine_info.counts_tokens
                      else 0)
            return Prediction(last.text, last.step, tokens, last.finish_reason)

        return cls(name, fill)


def load_predictor(
    spec: str,
    settings: Any = None,
    hole_tokens: dict[str, int] | None = None,
    device: str = "auto",
    dtype: str = "auto",
    canvas_length: int = CANVAS_LENGTH,
) -> Predictor:
    """`spec` is a baseline name, `bundled`, or a checkpoint folder / Hugging Face hub id."""
    if spec in BASELINES:
        return Predictor.baseline(spec)
    from engine import Engine, SamplerSettings

    engine = Engine.load(None if spec == BUNDLED else spec, device=device, dtype=dtype)
    return Predictor.engine(spec, engine, settings or SamplerSettings(),
                            hole_tokens or DEFAULT_HOLE_TOKENS, canvas_length)


@dataclass
class CaseResult:
    case_id: str
    kind: str
    protocol: str
    completion: str  # after the single-line rule: what was scored
    exact_match: bool
    edit_similarity: float
    passed: bool | None  # execution result; None for cases without a test
    steps: int
    tokens: int
    seconds: float
    finish_reason: str


@dataclass
class Summary:
    model: str
    protocol: str
    cases: int
    pass_at_1: float | None
    exact_match: float
    edit_similarity: float
    forward_passes_per_case: float
    tokens_per_forward: float | None  # None when nothing ran a forward pass (baselines)
    latency_ms_p50: float
    latency_ms_p95: float
    finish_reasons: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_case(
    predictor: Predictor, case: Case, protocol: str, exec_timeout: float = 5.0
) -> CaseResult:
    started = time.perf_counter()
    completion = predictor.fill(case, protocol)
    seconds = time.perf_counter() - started
    text = single_line(completion.text) if case.kind == "single-line" else completion.text
    passed = None
    if case.test is not None and case.entry_point is not None:
        passed = check_completion(
            case.prefix, text, case.suffix, case.test, case.entry_point, timeout=exec_timeout
        ).passed
    return CaseResult(
        case_id=case.id,
        kind=case.kind,
        protocol=protocol,
        completion=text,
        exact_match=exact_match(text, case.middle),
        edit_similarity=edit_similarity(text, case.middle),
        passed=passed,
        steps=completion.steps,
        tokens=completion.tokens,
        seconds=seconds,
        finish_reason=completion.finish_reason,
    )


def summarize(model: str, protocol: str, results: list[CaseResult]) -> Summary:
    count = len(results)
    executed = [r.passed for r in results if r.passed is not None]
    steps = sum(r.steps for r in results)
    latencies = sorted(r.seconds * 1000 for r in results)
    return Summary(
        model=model,
        protocol=protocol,
        cases=count,
        pass_at_1=sum(executed) / len(executed) if executed else None,
        exact_match=sum(r.exact_match for r in results) / count if count else 0.0,
        edit_similarity=sum(r.edit_similarity for r in results) / count if count else 0.0,
        forward_passes_per_case=steps / count if count else 0.0,
        tokens_per_forward=sum(r.tokens for r in results) / steps if steps else None,
        latency_ms_p50=percentile(latencies, 50),
        latency_ms_p95=percentile(latencies, 95),
        finish_reasons=dict(Counter(r.finish_reason for r in results)),
    )


def evaluate(
    predictors: Iterable[Predictor],
    cases: list[Case],
    protocols: Iterable[str] = PROTOCOLS,
    exec_timeout: float = 5.0,
    on_result: Callable[[str, CaseResult], None] | None = None,
) -> list[Summary]:
    """Every predictor on every case under every protocol; one summary per (predictor, protocol)."""
    summaries = []
    protocols = list(protocols)
    for predictor in predictors:
        if cases:
            predictor.fill(cases[0], protocols[0])  # warm-up, untimed and unscored
        for protocol in protocols:
            results = []
            for case in cases:
                result = run_case(predictor, case, protocol, exec_timeout)
                if on_result is not None:
                    on_result(predictor.name, result)
                results.append(result)
            summaries.append(summarize(predictor.name, protocol, results))
    return summaries
