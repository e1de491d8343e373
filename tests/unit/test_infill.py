"""The denoising loop, the AR baseline and the Engine API on tiny models.

Two kinds of model:
- the tiny random checkpoints (conftest), loaded through `Engine.load`, for determinism,
  cache equivalence and the AR decoder against a naive loop;
- a "bigram" Transformer built here: every layer's output projection is zero, so the residual
  stream is the token embedding and, with Dream's shifted logits, the token at p is predicted
  from the token at p-1 alone. Its embedding and head are set so chosen tokens follow each
  other with near certainty and every other token predicts a uniform distribution. That makes
  the exact steps, commits and stop behaviour of the loop predictable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from engine import Engine
from engine.decode import denoise
from engine.decode.ar import fim_prompt
from engine.decode.kv_cache import ContextCache, PrefixCache, hole_logits
from engine.models.config import ModelConfig
from engine.models.transformer import Transformer
from engine.text.canvas import layout
from engine.text.tokenizer import EOS, MASK, PAD, Tokenizer
from engine.types import InfillRequest, RewriteRequest, SamplerSettings
from tests.support.tiny_checkpoints import EXPAND, tiny_tokenizer

PREFIX = "def fib(n):"  # ends in '):', which heals to nothing (no longer token starts with it)
SUFFIX = "\n\nprint(fib(3))\n"


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    # Tiny models on a shared 2-core machine: a second intra-op thread only adds contention.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def dream(dream_ckpt: Path) -> Engine:
    return Engine.load(str(dream_ckpt), device="cpu", dtype="float32")


@pytest.fixture
def every_step_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """No step reuses an earlier pass's logits (engine.decode.denoise.advance): a step, a
    pass."""
    monkeypatch.setattr(denoise, "sees_nothing_new", lambda seq, changed, shifted: False)


@pytest.fixture(scope="module")
def llada(llada_ckpt: Path) -> Engine:
    return Engine.load(str(llada_ckpt), device="cpu", dtype="float32")


def bigram_engine(chain: dict[str, str], expand: bool = False) -> Engine:
    """A masked-family engine whose hole token at p follows from the token at p-1 by `chain`.

    Keys and values are token texts; the value EOS or EXPAND names those special tokens.
    """
    tok = Tokenizer(tiny_tokenizer(expand_token=expand))
    ids = {text: tok.token_id(text) if text in (EOS, EXPAND) else _single(tok, text)
           for pair in chain.items() for text in pair}
    eos = tok.token_id(EOS)
    cfg = ModelConfig(
        family="masked", layout="dream", vocab_size=tok.vocab_size, hidden_size=32,
        intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
        mask_token_id=tok.token_id(MASK), eos_token_id=eos, pad_token_id=eos, bos_token_id=eos,
        expand_token_id=tok.token_id(EXPAND) if expand else None,
    )
    torch.manual_seed(0)
    model = Transformer(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        emb[:, : len(chain)] = 0.0
        head.zero_()
        for dim, (src, dst) in enumerate(chain.items()):
            emb[ids[src], dim] = 4.0
            head[ids[dst], dim] = 10.0
    return Engine(model, tok)


def _single(tok: Tokenizer, text: str) -> int:
    ids = tok.encode(text)
    assert len(ids) == 1, f"{text!r} is not one token"
    return ids[0]


def test_stop_token_ends_the_completion_and_pads_the_rest() -> None:
    eng = bigram_engine({"):": "return", "return": " n", " n": EOS})
    drafts = list(eng.infill_stream(InfillRequest(PREFIX, SUFFIX, 6)))
    ret, n, eos = _single(eng.tokenizer, "return"), _single(eng.tokenizer, " n"), 0
    mask = eng.config.mask_token_id
    # One confident position per step, left to right; the stop token pads the rest at once.
    assert [d.token_ids for d in drafts] == [
        [ret, mask, mask, mask, mask, mask],
        [ret, n, mask, mask, mask, mask],
        [ret, n, eos, eos, eos, eos],
    ]
    assert [(d.step, d.committed, d.text, d.done) for d in drafts] == [
        (1, 1, "return", False), (2, 2, "return n", False), (3, 6, "return n", True)]
    res = eng.infill(PREFIX, SUFFIX, max_tokens=6)
    assert (res.text, res.token_ids, res.steps, res.tokens) == ("return n", [ret, n], 3, 2)
    assert res.tokens_per_step == pytest.approx(2 / 3)
    assert res.finish_reason == "stop"
    assert set(res.timings) >= {"tokenize", "forward", "sample", "total"}


def test_oracle_length_forbids_stop_tokens_and_fills_the_hole() -> None:
    eng = bigram_engine({"):": "return", "return": " n", " n": EOS})
    res = eng.infill(PREFIX, SUFFIX, max_tokens=4, stop_early=False)
    ret, n, pad = (_single(eng.tokenizer, "return"), _single(eng.tokenizer, " n"),
                   eng.tokenizer.token_id(PAD))
    # After ' n' EOS is forbidden; every other token is equally likely and the tie goes to the
    # lowest allowed id, <|pad|> (not a stop token of this config).
    assert res.token_ids == [ret, n, pad, pad]
    assert (res.steps, res.tokens, res.finish_reason) == (4, 4, "length")


def test_token_healing_constrains_the_first_token_and_strips_the_healed_text() -> None:
    # The prefix ends in 'sel', healed away; ' ' now predicts the hole's first token, and of
    # the tokens starting with 'sel' the model prefers 'self'.
    eng = bigram_engine({" ": "self", "self": ".", ".": EOS})
    res = eng.infill("x = sel", "", max_tokens=4)
    assert (res.text, res.finish_reason) == ("f.", "stop")
    # With no preference among the allowed tokens the lowest id, 'sel', is taken, and the
    # model continues from it: the same text by another split.
    eng = bigram_engine({"sel": "f", "f": EOS})
    assert eng.infill("x = sel", "", max_tokens=4).text == "f"


def test_a_hole_of_choices_holds_one_of_them_or_nothing() -> None:
    eng = bigram_engine({"):": "return", "return": " n", " n": EOS})
    # The text it wants is a choice: the same completion as unrestricted.
    assert eng.infill(PREFIX, SUFFIX, max_tokens=6).text == "return n"
    *_, last = eng.infill_stream(InfillRequest(PREFIX, SUFFIX, 6, choices=("return n", "x")))
    assert (last.text, last.finish_reason) == ("return n", "stop")
    # 'return' begins no choice: every other token ties, and of those allowed at the first
    # position the lowest id, the stop token, is taken: nothing; never the forbidden 'return'.
    *_, last = eng.infill_stream(InfillRequest(PREFIX, SUFFIX, 6, choices=(" n",)))
    assert (last.text, last.finish_reason) == ("", "stop")


def test_a_choice_begun_is_written_to_its_end_in_the_same_pass() -> None:
    # The model would stop after 'return'; the only choice it begins goes on with ' n'.
    eng = bigram_engine({"):": "return", "return": EOS})
    assert eng.infill(PREFIX, SUFFIX, max_tokens=6).text == "return"
    drafts = list(eng.infill_stream(InfillRequest(PREFIX, SUFFIX, 6, choices=("return n",))))
    assert [(d.step, d.text) for d in drafts] == [(1, "return n")]
    assert drafts[-1].finish_reason == "stop"
    # Two choices begin alike: the model decides at the first position they part.
    eng = bigram_engine({"):": "return", "return": " b", " b": EOS})
    drafts = list(eng.infill_stream(InfillRequest(PREFIX, SUFFIX, 6,
                                                  choices=("return n", "return b"))))
    assert [(d.step, d.text) for d in drafts] == [(1, "return"), (2, "return b")]
    # Only the model's own picks are scored: 'return' and ' b', not the forced stop tokens.
    assert drafts[-1].score.tokens == 2


@pytest.mark.parametrize("family", ["masked", "ar"])
def test_any_models_hole_of_choices_holds_one_of_them(family: str, dream: Engine,
                                                      ar_ckpt: Path) -> None:
    eng = dream if family == "masked" else Engine.load(str(ar_ckpt), device="cpu",
                                                        dtype="float32")
    choices = (" total\n", " totals\n", "\n")
    free = eng.infill(PREFIX, SUFFIX, max_tokens=12)
    assert free.text not in {"", *choices}  # random weights: the restriction bites
    for seed in range(4):
        settings = SamplerSettings(seed=seed, temperature=1.0)
        *_, last = eng.infill_stream(InfillRequest(PREFIX, SUFFIX, 12, settings,
                                                   choices=choices))
        assert last.text in {"", *choices}
    # A healed prefix ('sel', cut from it): the choices are what follows the user's 'sel'.
    *_, last = eng.infill_stream(InfillRequest("x = sel", SUFFIX, 12,
                                               choices=("f.items", "ected")))
    assert last.text in {"", "f.items", "ected"}
    # A choice longer than the hole is never begun.
    *_, last = eng.infill_stream(InfillRequest(PREFIX, SUFFIX, 2, choices=(" total = 1\n",)))
    assert last.text == ""


def test_cache_refresh_above_one_reuses_context_and_reports(
    dream: Engine, every_step_a_pass: None
) -> None:
    eng = bigram_engine({"):": "return", "return": " n", " n": EOS})
    # Attention adds nothing in the bigram model, so a stale cache changes nothing here.
    assert eng.infill(PREFIX, SUFFIX, max_tokens=6, cache_refresh=4).text == "return n"
    res = dream.infill(PREFIX, SUFFIX, max_tokens=6, sampler="topk", k=1, cache_refresh=3,
                       stop_early=False)
    assert (res.steps, res.tokens, res.finish_reason) == (6, 6, "length")
    assert res.tokens_per_step == 1.0


# Dream: three steps commit the hole's last positions, which a cached pass reads from the
# cache; LLaDA (unshifted): after the second refresh, the first masked position, three times.
@pytest.mark.parametrize(("family", "tokens", "refresh", "passes"),
                         [("dream", 6, 3, 3), ("llada", 8, 4, 5)])
def test_a_step_whose_pass_would_see_nothing_new_commits_from_the_last_ones_logits(
    family: str, tokens: int, refresh: int, passes: int, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    eng: Engine = request.getfixturevalue(family)
    kwargs = dict(max_tokens=tokens, sampler="topk", k=1, cache_refresh=refresh,
                  stop_early=False)
    ran: list[int] = []
    seen: list[torch.Tensor] = []  # each step's logits, as the sampler gets them
    commit = denoise.commit
    monkeypatch.setattr(denoise, "commit",
                        lambda seq, logits: (seen.append(logits.clone()), commit(seq, logits)))
    hook = eng.model.register_forward_pre_hook(lambda _, args: ran.append(1))
    try:
        reused = eng.infill(PREFIX, SUFFIX, **kwargs)
        reused_ran, reused_seen, ran[:], seen[:] = len(ran), list(seen), [], []
        monkeypatch.setattr(denoise, "sees_nothing_new", lambda seq, changed, shifted: False)
        every = eng.infill(PREFIX, SUFFIX, **kwargs)
    finally:
        hook.remove()
    # One position a step. A step after a pass that wrote the cache, when what was committed
    # since lies outside its own cached pass's queries, commits from that pass's logits.
    assert (every.steps, len(ran), every.tokens) == (tokens, tokens, tokens)
    assert (reused.steps, reused_ran, reused.tokens) == (passes, passes, tokens)
    assert reused.token_ids == every.token_ids
    # They are the logits the skipped pass computes; float32, to rounding (a pass over fewer
    # rows may sum in another order).
    assert len(reused_seen) == len(seen) == tokens
    for mine, its in zip(reused_seen, seen, strict=True):
        torch.testing.assert_close(mine, its, rtol=0, atol=1e-4)


def test_dreamon_expand_splits_a_mask_while_there_is_room() -> None:
    eng = bigram_engine({"):": "return", "return": EXPAND}, expand=True)
    pad = eng.tokenizer.token_id(PAD)
    ret = _single(eng.tokenizer, "return")
    prefix_len = len(eng.tokenizer.encode(PREFIX))
    # Canvas: prefix + 2 masks; room for one more token, so one expansion.
    # The EOS penalty keeps the uniform ties off EOS (which would delete the slot).
    drafts = list(eng.infill_stream(InfillRequest(PREFIX, "", 2, SamplerSettings(eos_penalty=1.0),
                                                  canvas_length=prefix_len + 3)))
    mask = eng.config.mask_token_id
    assert [d.token_ids for d in drafts] == [
        [ret, mask],
        [ret, mask, mask],  # 'return' → expand: the slot became two masks
        [ret, pad, mask],  # no room: expand is forbidden, the uniform tie goes to <|pad|>
        [ret, pad, pad],
    ]
    assert drafts[-1].done and drafts[-1].finish_reason == "length"
    # Restricted to the choice 'return', the hole still grows (expand is how it ends or
    # grows, never forbidden by the choices); <|pad|> ends no choice here, so the ties go to
    # 'return'. DreamOn's hole changes length: it holds the choices' tokens, not a choice.
    restricted = InfillRequest(PREFIX, "", 2, SamplerSettings(eos_penalty=1.0),
                               canvas_length=prefix_len + 3, choices=("return",))
    assert [d.token_ids for d in eng.infill_stream(restricted)] == [
        [ret, mask], [ret, mask, mask], [ret, ret, mask], [ret, ret, ret]]


def test_dreamon_stop_token_deletes_its_slot() -> None:
    eng = bigram_engine({"):": "return", "return": EOS}, expand=True)
    res = eng.infill(PREFIX, "", max_tokens=2)
    assert (res.text, res.steps, res.finish_reason) == ("return", 2, "stop")


def _naive_greedy(eng: Engine, prefix: str, suffix: str, n: int) -> list[int]:
    """Low-confidence remasking, one token per step, full forward every step: the reference."""
    canvas = layout(eng.tokenizer, eng.config, prefix, suffix, n, vocab=eng.vocab)
    x = torch.tensor(canvas.ids)
    s, e = canvas.hole_start, canvas.hole_end
    banned = [eng.config.mask_token_id, *eng.config.stop_token_ids]
    while (x[s:e] == eng.config.mask_token_id).any():
        logits = eng.forward_logits(x[None])[0, s:e].float()
        logits[:, banned] = float("-inf")
        conf, tokens = torch.softmax(logits, -1).max(-1)
        conf[x[s:e] != eng.config.mask_token_id] = -1.0
        best = int(conf.argmax())
        x[s + best] = tokens[best]
    return x[s:e].tolist()


@pytest.mark.parametrize("family", ["dream", "llada"])
def test_denoise_matches_a_naive_loop_token_for_token(
    family: str, request: pytest.FixtureRequest
) -> None:
    eng: Engine = request.getfixturevalue(family)
    res = eng.infill(PREFIX, SUFFIX, max_tokens=5, sampler="topk", k=1, stop_early=False,
                     cache_refresh=1)
    assert res.token_ids == _naive_greedy(eng, PREFIX, SUFFIX, 5)
    assert res.steps == 5


@pytest.mark.parametrize("family", ["dream", "llada"])
@pytest.mark.parametrize("hole_at_start", [False, True])
def test_cached_step_on_a_fresh_cache_equals_the_full_pass(
    family: str, hole_at_start: bool, request: pytest.FixtureRequest
) -> None:
    eng: Engine = request.getfixturevalue(family)
    prefix = "" if hole_at_start else PREFIX
    canvas = layout(eng.tokenizer, eng.config, prefix, SUFFIX, 4, vocab=eng.vocab)
    x = torch.tensor(canvas.ids)
    x[canvas.hole_start + 1] = eng.tokenizer.encode("x")[0]  # a committed token in the hole
    hole = (canvas.hole_start, canvas.hole_end)
    with torch.inference_mode():
        full, kv = hole_logits(eng.model, x, hole, None)
        cached, _ = hole_logits(eng.model, x, hole, ContextCache(kv, x.shape[0]))
    torch.testing.assert_close(cached, full, rtol=1e-5, atol=1e-5)
    expected = eng.forward_logits(x[None])[0, hole[0] : hole[1]]
    # Not the same computation (the head over the hole's rows only vs over the whole
    # sequence): the CPU kernels may block the matmuls differently and sum in another order,
    # a few float32 ulps on logits of magnitude ~1 (<= 4.8e-7 seen with AVX2 kernels).
    torch.testing.assert_close(full, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["dream", "llada"])
def test_windowed_refresh_recomputes_the_window_and_spanning_the_canvas_is_a_full_pass(
    family: str, request: pytest.FixtureRequest, every_step_a_pass: None
) -> None:
    eng: Engine = request.getfixturevalue(family)
    lengths: list[int] = []
    hook = eng.model.register_forward_pre_hook(lambda _, args: lengths.append(args[0].shape[1]))
    kwargs = dict(max_tokens=6, sampler="topk", k=1, stop_early=False, cache_refresh=2)
    try:
        full = eng.infill(PREFIX, SUFFIX, refresh_window=None, **kwargs)
        full_lengths, lengths[:] = list(lengths), []
        spanning = eng.infill(PREFIX, SUFFIX, refresh_window=10_000, **kwargs)
        spanning_lengths, lengths[:] = list(lengths), []
        settings = eng.sampler_settings("topk", k=1, cache_refresh=2, refresh_window=3)
        drafts = list(eng.infill_stream(InfillRequest(PREFIX, SUFFIX, 6, settings),
                                        stop_early=False))
    finally:
        hook.remove()
    canvas = len(layout(eng.tokenizer, eng.config, PREFIX, SUFFIX, 6, vocab=eng.vocab).ids)
    assert (spanning.token_ids, spanning.steps) == (full.token_ids, full.steps)
    assert full_lengths[::2] == spanning_lengths[::2] == [canvas] * 3  # steps 1, 3, 5 refresh
    # Windowed: the first pass is whole; a refresh runs the masked range (first to last
    # masked position before it), the token before it where logits are shifted (Dream), and
    # 3 positions on each side.
    mask = eng.config.mask_token_id
    before_it = 1 if eng.config.shift_logits else 0
    ranges = []
    for before in (drafts[1], drafts[3]):
        masked = [i for i, t in enumerate(before.token_ids) if t == mask]
        ranges.append(masked[-1] - masked[0] + 1)
    assert lengths[0] == canvas
    assert lengths[2::2] == [r + before_it + 2 * 3 for r in ranges]


def test_sampling_is_deterministic_under_a_seed(dream: Engine) -> None:
    kwargs = dict(max_tokens=6, temperature=1.0, sampler="entropy", gamma=0.5)
    a = dream.infill(PREFIX, SUFFIX, seed=3, **kwargs)
    b = dream.infill(PREFIX, SUFFIX, seed=3, **kwargs)
    assert (a.token_ids, a.steps) == (b.token_ids, b.steps)
    settings = SamplerSettings(sampler="entropy", gamma=0.5, temperature=1.0, seed=3)
    c = dream.infill(PREFIX, SUFFIX, max_tokens=6, settings=settings)
    assert (c.token_ids, c.steps) == (a.token_ids, a.steps)


def test_learned_sampler_spans_one_token_per_pass_to_all_at_once(
    dream: Engine, every_step_a_pass: None
) -> None:
    kwargs = dict(max_tokens=6, stop_early=False, cache_refresh=2)
    # Above any probability the policy gives, it commits the most confident position alone:
    # top-k k=1, token for token.
    strict = dream.infill(PREFIX, SUFFIX, sampler="learned", cutoff=1.01, **kwargs)
    one = dream.infill(PREFIX, SUFFIX, sampler="topk", k=1, **kwargs)
    assert (strict.token_ids, strict.steps) == (one.token_ids, one.steps)
    assert strict.steps == 6
    # At 0 every position commits in the first pass.
    assert dream.infill(PREFIX, SUFFIX, sampler="learned", cutoff=0.0, **kwargs).steps == 1


def test_cancel_is_checked_between_steps(dream: Engine) -> None:
    calls = []

    def cancel() -> bool:
        calls.append(1)
        return len(calls) > 2

    settings = SamplerSettings(sampler="topk", k=1)
    drafts = list(dream.infill_stream(InfillRequest(PREFIX, SUFFIX, 8, settings), cancel,
                                      stop_early=False))
    assert [d.step for d in drafts] == [1, 2, 2]
    assert drafts[-1].done and drafts[-1].finish_reason == "cancelled"
    assert drafts[-1].committed == 2


def test_ar_decoding_matches_a_naive_greedy_loop(ar_ckpt: Path) -> None:
    eng = Engine.load(str(ar_ckpt), device="cpu", dtype="float32")
    res = eng.infill(PREFIX, SUFFIX, max_tokens=6, stop_early=False)
    canvas = layout(eng.tokenizer, eng.config, PREFIX, SUFFIX, 6, vocab=eng.vocab)
    ids = fim_prompt(eng.tokenizer, canvas)
    banned = [eng.config.mask_token_id, *eng.config.stop_token_ids]
    out = []
    for _ in range(6):
        logits = eng.forward_logits(torch.tensor([ids + out]))[0, -1]
        logits[banned] = float("-inf")
        out.append(int(logits.argmax()))
    assert res.token_ids == out
    assert (res.steps, res.tokens, res.finish_reason) == (6, 6, "length")
    assert res.text == eng.tokenizer.decode(out)


def test_block_family_is_served_through_the_same_api(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "DiffusionGemmaForBlockDiffusion"):
        pytest.skip("this transformers has no DiffusionGemma")
    from engine.models.block import denoise_block
    from engine.models.checkpoint import read_checkpoint
    from tests.support.diffusion_gemma import write_diffusion_gemma

    ckpt = read_checkpoint(write_diffusion_gemma(tmp_path))
    model = transformers.DiffusionGemmaForBlockDiffusion.from_pretrained(str(ckpt.path))
    eng = Engine(model, ckpt.tokenizer, ckpt.config, checkpoint=ckpt)
    prefix, suffix = "def fib(n):\r\n    return sel", "\r\n"
    res = eng.infill(prefix, suffix, max_tokens=8, sampler="entropy", gamma=0.1, seed=5)
    settings = SamplerSettings(sampler="entropy", gamma=0.1, seed=5)
    # No BOS and no healing for this family; CRLF is laid out as LF.
    prefix_ids = eng.tokenizer.encode("def fib(n):\n    return sel")
    direct = list(denoise_block(eng.model, ckpt, prefix_ids, eng.tokenizer.encode("\n"), 8,
                                settings))
    last = direct[-1]
    assert res.steps == last.step
    assert res.text == last.text.replace("\n", "\r\n")
    assert res.token_ids == eng.completion_ids(last)
    assert res.finish_reason == last.finish_reason


def test_prefix_cache_reuses_the_previous_requests_prefix_keys(dream: Engine) -> None:
    dream.decoder.prefix_cache = PrefixCache()
    prefix = "import os\nimport sys\n\n\ndef main(argv):\n    path = os.path.join(argv[1], 'x')\n"
    exact = dream.infill(prefix, "\n", max_tokens=6, cache_refresh=1)
    first = dream.infill(prefix, "\n", max_tokens=6, cache_refresh=4)
    assert (dream.decoder.prefix_cache.hits, dream.decoder.prefix_cache.misses) == (0, 1)
    again = dream.infill(prefix, "\n", max_tokens=6, cache_refresh=4)
    assert dream.decoder.prefix_cache.hits == 1
    # Same canvas: the reused keys are exactly what a full pass computes.
    assert again.token_ids == first.token_ids
    assert first.finish_reason == exact.finish_reason == "length"
    typed = dream.infill(prefix + "    ", "\n", max_tokens=6, cache_refresh=4)
    assert dream.decoder.prefix_cache.hits == 2 and typed.finish_reason in ("stop", "length")
    # Exact mode (R=1) never reuses another request's keys.
    dream.infill(prefix, "\n", max_tokens=6, cache_refresh=1)
    assert (dream.decoder.prefix_cache.hits, dream.decoder.prefix_cache.misses) == (2, 1)



def test_a_request_that_shares_no_prefix_does_not_depend_on_earlier_requests(dream: Engine):
    """Code actions and batch set share_prefix=False: their edit is what a fresh engine gives."""
    dream.decoder.prefix_cache = PrefixCache()
    prefix = "import os\nimport sys\n\n\ndef main(argv):\n    path = os.path.join(argv[1], 'x')\n"
    fresh = dream.infill(prefix, "\n", max_tokens=6, share_prefix=False)
    dream.infill(prefix, "\n    return path\n", max_tokens=6)  # stores this prefix's keys
    again = dream.infill(prefix, "\n", max_tokens=6, share_prefix=False)
    assert (dream.decoder.prefix_cache.hits, dream.decoder.prefix_cache.misses) == (0, 1)
    assert (again.token_ids, again.steps) == (fresh.token_ids, fresh.steps)

# -- rewrites ---------------------------------------------------------------------------------


def test_kept_flags_drop_the_lowest_scores_first():
    from engine.text.remask import kept_flags

    scores = [0.9, 0.1, 0.5, 0.1, 0.8]
    assert kept_flags(scores, 0.0) == [True] * 5
    assert kept_flags(scores, 0.2) == [True, True, True, False, True]  # tie: the later goes
    assert kept_flags(scores, 0.4) == [True, False, True, False, True]
    assert kept_flags(scores, 0.6) == [True, False, False, False, True]
    assert kept_flags(scores, 1.0) == [False] * 5


def test_rewrite_keeps_the_tokens_the_model_is_surest_of(dream: Engine) -> None:
    prefix, suffix = "def f(a):\n    ", "\n"
    original = "return a + 1"
    ids = dream.tokenizer.encode(original)
    # strength 0: every original token stays where it was
    last = list(dream.rewrite_stream(RewriteRequest(prefix, suffix, original, 0.0)))[-1]
    assert last.token_ids[: len(ids)] == ids
    # strength 0.5: the most likely half (by one fully masked pass) stays
    canvas = layout(dream.tokenizer, dream.config, prefix, suffix, len(ids) + 8)
    logits = dream.forward_logits(torch.tensor([canvas.ids]))[0]
    probs = logits[canvas.hole_start : canvas.hole_start + len(ids)].softmax(-1)
    scores = probs[torch.arange(len(ids)), torch.tensor(ids)].tolist()
    from engine.text.remask import kept_flags

    keep = kept_flags(scores, 0.5)
    half = list(dream.rewrite_stream(RewriteRequest(prefix, suffix, original, 0.5)))
    assert [t for t, k in zip(half[-1].token_ids, keep, strict=False) if k] == \
        [t for t, k in zip(ids, keep, strict=True) if k]
    assert half[0].step == 2  # the scoring pass counts as a forward pass
    # strength 1: a fresh infill of a hole the original's size and half again
    fresh = list(dream.rewrite_stream(RewriteRequest(prefix, suffix, original, 1.0)))[-1]
    assert fresh == list(dream.infill_stream(InfillRequest(prefix, suffix, len(ids) + 8)))[-1]


def test_min_tokens_keeps_stop_tokens_out_of_the_first_positions(dream: Engine) -> None:
    result = dream.infill("x = ", "\n", 6, min_tokens=3)
    assert len(result.token_ids) >= 3
