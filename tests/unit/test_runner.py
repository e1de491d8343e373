"""The runner: the one place a request's forward passes run, alone or batched, for the
in-process engine and the resident engine's scheduler alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.decode.runner import Runner
from engine.decode.sequence import Sequence
from engine.types import Draft, InfillRequest, SamplerSettings

EXACT = SamplerSettings(cache_refresh=1)  # every pass a full one: every pass can batch


@pytest.fixture(scope="module")
def dream(dream_ckpt: Path):
    from engine import Engine

    return Engine.load(str(dream_ckpt), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def ar(ar_ckpt: Path):
    from engine import Engine

    return Engine.load(str(ar_ckpt), device="cpu", dtype="float32")


def run_together(runner: Runner, lives: list[Sequence]) -> tuple[list[list[Draft]], list[bool]]:
    """Every live request stepped in the same rounds until all are done: each one's drafts,
    and per round whether its passes ran as one batch."""
    drafts: list[list[Draft]] = [[] for _ in lives]
    batched: list[bool] = []
    for _ in range(64):  # rounds; the holes here need far fewer
        active = [i for i, live in enumerate(lives) if not (live.last and live.last.done)]
        if not active:
            return drafts, batched
        stepped = runner.step([lives[i] for i in active])
        batched.append(all(s.batched for s in stepped))
        for i, s in zip(active, stepped, strict=True):
            assert s.error is None
            drafts[i].append(s.draft)
    raise AssertionError("the requests did not finish")


def test_full_passes_of_several_holes_run_as_one_batch_and_each_gets_what_it_gets_alone(dream):
    requests = [InfillRequest("def f(x):\n    return ", "\n", 6, EXACT),
                InfillRequest("y = ", "\n", 4, EXACT)]
    alone = [list(dream.infill_stream(r)) for r in requests]
    together, batched = run_together(dream.runner, [dream.sequence(r) for r in requests])
    assert batched[0]  # the first round ran both canvases in one pass
    for mine, theirs in zip(together, alone, strict=True):
        assert [(d.token_ids, d.step, d.done) for d in mine] == \
            [(d.token_ids, d.step, d.done) for d in theirs]


def test_an_int8_runner_never_batches(dream):
    requests = [InfillRequest("a = ", "\n", 4, EXACT), InfillRequest("b = ", "\n", 4, EXACT)]
    seqs = [dream.sequence(r) for r in requests]
    _, batched = run_together(Runner(dream.model, batch=False), seqs)
    assert not any(batched)


def broken() -> Sequence:
    """A request whose pass raises (a bug, a device error)."""

    def drafts() -> Iterator[Draft]:
        raise RuntimeError("the device fell over")
        yield  # a generator, as the other families' drafts are

    return Sequence(InfillRequest("z = ", "\n", 4), drafts=drafts())


def test_a_step_that_raises_costs_its_own_request_only(dream):
    good = dream.sequence(InfillRequest("x = ", "\n", 4))
    bad, other = broken(), dream.sequence(InfillRequest("y = ", "\n", 4))
    stepped = dream.runner.step([good, bad, other])
    assert [s.error is None for s in stepped] == [True, False, True]
    assert str(stepped[1].error) == "the device fell over" and stepped[1].draft is None
    assert stepped[0].draft.step == stepped[2].draft.step == 1
    with pytest.raises(RuntimeError, match="fell over"):
        list(dream.runner.drafts(broken()))


def test_a_late_request_ends_before_its_first_pass(dream):
    live = dream.sequence(InfillRequest("x = ", "\n", 4), deadline=0.0)  # long past
    (last,) = list(dream.runner.drafts(live))
    assert (last.done, last.finish_reason, last.step) == (True, "deadline", 0)


def test_a_cancelled_ar_request_ends_with_the_text_it_has(ar):
    asked = []

    def cancel() -> bool:
        asked.append(1)
        return len(asked) > 2

    drafts = list(ar.infill_stream(InfillRequest("def f(x):\n    return ", "\n", 8), cancel))
    assert [d.step for d in drafts] == [1, 2, 2]
    assert drafts[-1].done and drafts[-1].finish_reason == "cancelled"
    assert (drafts[-1].token_ids, drafts[-1].text) == (drafts[-2].token_ids, drafts[-2].text)
