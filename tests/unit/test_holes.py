"""Several holes in one request (engine.types.HolesRequest, engine.decode.holes).

The per-hole rules are checked on the tiny Dream checkpoint by handing the joint Sequence's
step logits chosen here (`advance`), so what each step commits is known exactly; the bundled model
checks that one hole decodes as the InfillRequest it stands for; the AR baseline and DreamOn
fill their holes one after another, which must equal the InfillRequests run by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from engine import Engine
from engine.backend import CountingBackend
from engine.decode.denoise import advance, masked_range
from engine.decode.sequence import Sequence
from engine.serve.socket import protocol
from engine.types import (
    Draft,
    HolesRequest,
    InfillRequest,
    SamplerSettings,
    UnitEnd,
    last_draft,
)
from tests.support.tiny_checkpoints import write_dream_checkpoint

# Neither '):' nor '1' heals (no longer token starts with them): each hole starts afresh.
TEXTS = ("def f(x):", "\n    y = x + 1", "\n")
LINE = UnitEnd("line")


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def dream(dream_ckpt: Path) -> Engine:
    return Engine.load(str(dream_ckpt), device="cpu", dtype="float32")


def joint(engine: Engine, request: HolesRequest) -> Sequence:
    steps = engine.decoder.start(Sequence(request))
    # Denoised jointly: the masked step, with one span per hole.
    assert steps.rules is not None and len(steps.rules.holes) == len(request.max_tokens)
    return steps


def chosen_logits(engine: Engine, steps: Sequence, rows: list[tuple[int, float]]
                  ) -> torch.Tensor:
    """Logits of the masked range in which row i proposes token rows[i][0] with logit
    rows[i][1] over zeros: its confidence rises with the logit."""
    lo, hi = masked_range(steps)
    assert hi - lo == len(rows)
    logits = torch.zeros(len(rows), engine.model.cfg.vocab_size)
    for i, (token, value) in enumerate(rows):
        logits[i, token] = value
    return logits


def span_tokens(steps: Sequence) -> list[int]:
    return steps.hole_tokens()


def words(engine: Engine, *texts: str) -> list[int]:
    """One token id per text (each must be a single token)."""
    ids = [engine.tokenizer.encode(text) for text in texts]
    assert all(len(i) == 1 for i in ids), ids
    return [i[0] for i in ids]


def test_a_stop_in_one_hole_pads_that_hole_alone(dream: Engine) -> None:
    steps = joint(dream, HolesRequest(TEXTS, (4, 4), SamplerSettings(stop_run=False)))
    assert steps.rules.heals == ["", ""]
    (a0, b0), (a1, b1) = steps.rules.holes
    kept = span_tokens(steps)[b0:a1]
    stop, pad = dream.config.eos_token_id, steps.rules.pad_id
    x, y, one, ret = words(dream, "x", "y", "1", "return")
    rows = [(ret, 30.0), (stop, 30.0), (x, 30.0), (y, 30.0)]  # hole 0: a stop second
    rows += [(t, 30.0) for t in kept]  # the kept code's rows are never read
    rows += [(ret, 30.0), (x, 30.0), (one, 30.0), (y, 30.0)]  # hole 1: no stop
    draft = advance(dream.model, steps, chosen_logits(dream, steps, rows))
    tokens = span_tokens(steps)
    assert tokens[a0:b0] == [ret, stop, pad, pad]
    assert tokens[b0:a1] == kept
    assert tokens[a1:b1] == [ret, x, one, y]
    assert draft.holes == ("return", dream.tokenizer.decode([ret, x, one, y]))
    assert (draft.done, draft.finish_reason, steps.ended) == (True, "length", [True, False])
    assert draft.token_ids == [ret, ret, x, one, y]
    assert draft.text == "return" + TEXTS[1] + draft.holes[1]


def test_a_hole_that_holds_its_unit_end_is_padded_and_the_others_go_on(dream: Engine) -> None:
    settings = SamplerSettings(sampler="topk", k=2, stop_run=False)
    steps = joint(dream, HolesRequest(TEXTS, (4, 4), settings, until=(LINE, LINE)))
    (a0, b0), (a1, b1) = steps.rules.holes
    kept = span_tokens(steps)[b0:a1]
    newline, x, y = words(dream, "\n", "x", "y")
    rows = [(x, 30.0), (newline, 30.0), (y, 2.0), (y, 2.0)]  # hole 0: 'x\n' committed
    rows += [(t, 1.0) for t in kept]
    rows += [(y, 3.0), (y, 3.0), (y, 4.0), (y, 3.0)]  # below hole 0's: the sampler's k=2
    draft = advance(dream.model, steps, chosen_logits(dream, steps, rows))
    tokens, committed = span_tokens(steps), steps.committed.tolist()
    assert tokens[a0:b0] == [x, newline, steps.rules.pad_id, steps.rules.pad_id]
    assert committed[a0:b0] == [True] * 4
    # Every hole still masked commits at least its most confident position a step.
    assert committed[a1:b1] == [False, False, True, False]
    assert draft.holes == ("x\n", "")
    assert not draft.done and steps.ended == [True, False]


def test_a_later_hole_is_healed_from_the_code_before_it(dream: Engine) -> None:
    steps = joint(dream, HolesRequest(("def f(x):", "\n    y = x\n", "\n"), (3, 3)))
    assert steps.rules.heals == ["", "\n"]
    (a0, b0), (a1, b1) = steps.rules.holes
    kept = span_tokens(steps)[b0:a1]
    assert dream.tokenizer.decode(kept) == "\n    y = x"  # its newline is the hole's now
    x, newline = words(dream, "x", "\n")
    logits = chosen_logits(dream, steps, [(x, 30.0)] * (b1 + 0))
    logits[a1, newline] = 20.0  # below x, which cannot complete the healed newline
    draft = advance(dream.model, steps, logits)
    assert span_tokens(steps)[a1:b1] == [newline, x, x]
    assert draft.holes == ("xxx", "xx")  # the healed newline is the kept code's


def test_min_tokens_forbids_a_stop_at_the_start_of_every_hole(dream: Engine) -> None:
    steps = joint(dream, HolesRequest(TEXTS, (3, 3), SamplerSettings(min_tokens=2)))
    (a0, b0), (a1, b1) = steps.rules.holes
    kept = span_tokens(steps)[b0:a1]
    stop = dream.config.eos_token_id
    rows = [(stop, 30.0)] * 3 + [(t, 1.0) for t in kept] + [(stop, 30.0)] * 3
    advance(dream.model, steps, chosen_logits(dream, steps, rows))
    tokens, stops = span_tokens(steps), dream.decoder.stop_ids()
    for a in (a0, a1):
        assert tokens[a] not in stops and tokens[a + 1] not in stops


def test_one_hole_decodes_as_the_infill_it_stands_for(bundled_engine: Engine) -> None:
    prefix, suffix = "class Stack:\n    def __init__(self):\n", "\n    def push(self, x):\n"
    for until in (None, UnitEnd("brackets")):
        here = last_draft(bundled_engine.infill_stream(InfillRequest(prefix, suffix, 16,
                                                                     until=until)))
        holes = last_draft(bundled_engine.holes_stream(HolesRequest(
            (prefix, suffix), (16,), until=None if until is None else (until,))))
        assert (holes.holes, holes.step, holes.finish_reason) == ((here.text,), here.step,
                                                                  here.finish_reason)


def test_fill_holes_and_the_counting_backend_see_the_same_run(bundled_engine: Engine) -> None:
    texts = ("def area(w, h):\n", "\n\ndef perimeter(w, h):\n", "\n")
    result = bundled_engine.fill_holes(texts, (12, 12), until=(LINE, LINE))
    counting = CountingBackend(bundled_engine)
    last = last_draft(counting.holes_stream(HolesRequest(texts, (12, 12), until=(LINE, LINE))))
    assert (last.holes, last.step, last.finish_reason) == (result.texts, result.steps,
                                                           result.finish_reason)
    assert (counting.requests, counting.steps) == (1, result.steps)
    assert len(result.texts) == 2


def sequential_by_hand(engine: Engine, texts: tuple[str, ...], sizes: tuple[int, ...]
                       ) -> tuple[list[str], int]:
    filled: list[str] = []
    passes = 0
    for k, size in enumerate(sizes):
        prefix = texts[0] + "".join(f + t for f, t in zip(filled, texts[1 : k + 1],
                                                          strict=True))
        last = last_draft(engine.infill_stream(InfillRequest(prefix, "".join(texts[k + 1 :]),
                                                             size)))
        filled.append(last.text)
        passes += last.step
    return filled, passes


@pytest.mark.parametrize("family", ["ar", "dreamon", "block"])
def test_other_families_fill_their_holes_one_after_another(
        family: str, ar_ckpt: Path, tmp_path: Path) -> None:
    if family == "block":
        from tests.support.diffusion_gemma import write_diffusion_gemma

        folder = write_diffusion_gemma(tmp_path)
    else:
        folder = ar_ckpt if family == "ar" else write_dream_checkpoint(tmp_path,
                                                                       expand_token=True)
    engine = Engine.load(str(folder), device="cpu", dtype="float32")
    texts = ("def f(x):\n", "\n    y = 2\n", "\n    return y\n", "\n")
    request = HolesRequest(texts, (3, 4, 2))
    seq = engine.decoder.start(Sequence(request))
    assert seq.rules is None and seq.drafts.__name__ == "sequential_holes"
    drafts = list(engine.holes_stream(request))
    filled, passes = sequential_by_hand(engine, texts, (3, 4, 2))
    assert (list(drafts[-1].holes), drafts[-1].step) == (filled, passes)
    steps = [d.step for d in drafts]
    assert steps == sorted(steps) and [d.done for d in drafts].count(True) == 1


@pytest.mark.parametrize(("request_", "message"), [
    (HolesRequest(("a", "b"), (4, 4)), "texts: expected one more text than holes (3"),
    (HolesRequest(("a",) * 18, (1,) * 17), "holes: expected an integer in 1..16, got 17"),
    (HolesRequest(("a",) * 4, (1000,) * 3), "max_tokens in all: expected an integer in "
     "1..2048, got 3000"),
    (HolesRequest(("a", "b"), (0,)), "max_tokens[0]: expected an integer in 1..1024"),
    (HolesRequest(("a", "b", "c"), (4, 4), until=(LINE,)), "until: expected one unit"),
    (HolesRequest(("a", "x = 1\n" * 40, "c"), (4, 4), canvas_length=64),
     "2 holes of 8 tokens and the"),
])
def test_a_request_the_engine_cannot_serve_is_refused_with_the_reason(
        dream: Engine, request_: HolesRequest, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace("[", r"\[")):
        next(dream.holes_stream(request_))


def test_the_wire_carries_a_holes_request_and_its_drafts() -> None:
    request = HolesRequest(TEXTS, (4, 6), SamplerSettings(threshold=0.8), 128, 0.5,
                           (LINE, None))
    message = json.loads(json.dumps(protocol.to_wire(request, "file.py")))
    assert message["op"] == "holes" and message["document"] == protocol.document_key("file.py")
    assert protocol.from_wire(message) == request
    draft = Draft(step=3, token_ids=[1, 2], committed=2, text="a\nb", done=True,
                  finish_reason="stop", holes=("a", "b"))
    assert protocol.draft_from_wire(protocol.draft_to_wire(draft)) == draft
    plain = Draft(step=1, token_ids=[], committed=0, text="", done=False)
    assert "holes" not in protocol.draft_to_wire(plain)  # an older client builds its Draft


@pytest.mark.parametrize(("fields", "message"), [
    ({"texts": ["a", "b"], "max_tokens": [4, 4]}, "texts: expected one more text"),
    ({"texts": ["a", 3], "max_tokens": [4]}, "texts[1]: expected a string"),
    ({"texts": ["a", "b"], "max_tokens": 4}, "max_tokens: expected <class 'list'>"),
    ({"texts": ["a", "b"], "max_tokens": [True]}, "max_tokens[0]: expected an integer"),
    ({"texts": ["a", "b"], "max_tokens": [4], "until": [{"kind": "line"}, None]},
     "until: expected one unit (or null) per hole (1), got 2"),
    ({"texts": ["a", "b"], "max_tokens": [4], "until": [{"kind": "word"}]}, "until.kind"),
])
def test_a_malformed_holes_message_is_refused_with_the_reason(fields: dict, message: str) -> None:
    with pytest.raises(protocol.ProtocolError) as error:
        protocol.from_wire({"op": "holes", "id": 1, **fields})
    assert error.value.code == "bad-request" and str(error.value).startswith(message)
