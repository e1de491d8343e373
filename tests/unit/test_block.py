"""The block family (DiffusionGemma): our denoising loop against transformers' `generate`.

A tiny random DiffusionGemma (real config class, real tensor names, MoE and sliding layers
included) is written with `save_pretrained` next to the tiny BPE tokenizer, loaded through
`load_block_model`, and run both ways from the same seed.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DiffusionGemmaForBlockDiffusion"):
    pytest.skip("this transformers has no DiffusionGemma", allow_module_level=True)

from engine.decode.runner import Runner  # noqa: E402
from engine.decode.sequence import Sequence  # noqa: E402
from engine.models.block import (  # noqa: E402
    FIM_TEMPLATE,
    GEMMA_CHAT_TEMPLATE,
    block_settings,
    block_stop_ids,
    denoise_block,
    entropy_bound_accept,
    fim_prompt_ids,
    fim_template,
    load_block_model,
)
from engine.models.checkpoint import Checkpoint, read_checkpoint  # noqa: E402
from engine.text.tokenizer import Tokenizer  # noqa: E402
from engine.types import Draft, InfillRequest, SamplerSettings  # noqa: E402
from tests.support.diffusion_gemma import CANVAS, STEPS, write_diffusion_gemma  # noqa: E402
from tests.support.tiny_checkpoints import tiny_tokenizer  # noqa: E402

PREFIX = "def fib(n):\n    if n < 2:\n        "
SUFFIX = "\n    return fib(n - 1) + fib(n - 2)\n"


@pytest.fixture(scope="module")
def dg(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Checkpoint]:
    ckpt = read_checkpoint(write_diffusion_gemma(tmp_path_factory.mktemp("diffusion_gemma")))
    return load_block_model(ckpt, device="cpu", dtype="float32"), ckpt


class DraftRecorder(transformers.generation.streamers.BaseStreamer):
    """Collects the argmax canvas generate() streams after every denoising step."""

    def __init__(self) -> None:
        self.drafts: list[list[int]] = []

    def put(self, value: torch.Tensor) -> None:
        pass

    def put_draft(self, value: torch.Tensor) -> None:
        self.drafts.append(value[0].tolist())

    def end(self) -> None:
        pass


def context_ids(ckpt: Checkpoint) -> tuple[list[int], list[int]]:
    return ckpt.tokenizer.encode(PREFIX), ckpt.tokenizer.encode(SUFFIX)


def with_generation(ckpt: Checkpoint, **changes: Any) -> Checkpoint:
    return dataclasses.replace(ckpt, generation_config={**ckpt.generation_config, **changes})


def reference(model: Any, prompt: list[int], seed: int, max_tokens: int,
              **generate_kwargs: Any) -> tuple[list[int], list[list[int]], float]:
    """generate()'s tokens after the prompt, its per-step drafts and tokens_per_forward."""
    recorder = DraftRecorder()
    torch.manual_seed(seed)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, streamer=recorder,
                         **generate_kwargs)
    return out.sequences[0, len(prompt):].tolist(), recorder.drafts, float(out.tokens_per_forward)


def ours(model: Any, ckpt: Checkpoint, seed: int, max_tokens: int, **kwargs: Any) -> list[Draft]:
    prefix_ids, suffix_ids = context_ids(ckpt)
    settings = SamplerSettings(sampler="entropy", gamma=0.1, seed=seed)
    return list(denoise_block(model, ckpt, prefix_ids, suffix_ids, max_tokens, settings,
                              **kwargs))


def assert_same_run(drafts: list[Draft], ref: tuple[list[int], list[list[int]], float]) -> None:
    tokens, ref_drafts, tokens_per_forward = ref
    final = drafts[-1]
    assert final.done and all(not d.done for d in drafts[:-1])
    assert final.token_ids == tokens
    # One draft per decoder pass, each the argmax canvas generate streamed at that step.
    assert [d.token_ids[-CANVAS:] for d in drafts[:-1]] == ref_drafts
    assert final.step == len(ref_drafts)
    assert final.committed / final.step == pytest.approx(tokens_per_forward, rel=1e-6)


@pytest.mark.parametrize("seed", [0, 7])
def test_two_canvases_match_generate_token_for_token(dg: tuple[Any, Checkpoint], seed: int):
    model, ckpt = dg
    prompt = fim_prompt_ids(ckpt, *context_ids(ckpt))
    drafts = ours(model, ckpt, seed, 2 * CANVAS)
    assert_same_run(drafts, reference(model, prompt, seed, 2 * CANVAS))
    assert len(drafts[-1].token_ids) == 2 * CANVAS
    assert drafts[-1].step == 2 * STEPS  # a random model never gets confident


@pytest.mark.parametrize("stability", [0, 1])
def test_adaptive_stop_matches_generate(dg: tuple[Any, Checkpoint], stability: int):
    model, ckpt = dg
    # Any entropy counts as confident, so stability alone decides when the run stops. With
    # stability 0 it stops after the first step; a random model's argmax canvas never holds
    # still, so with 1 it runs to the step limit, as generate does.
    changes = {"confidence_threshold": 1e3, "stability_threshold": stability}
    ckpt = with_generation(ckpt, **changes)
    prompt = fim_prompt_ids(ckpt, *context_ids(ckpt))
    drafts = ours(model, ckpt, 3, CANVAS)
    assert_same_run(drafts, reference(model, prompt, 3, CANVAS, **changes))
    assert drafts[-1].step == (1 if stability == 0 else STEPS)


def test_eos_becomes_pad_as_in_generate(dg: tuple[Any, Checkpoint]):
    model, ckpt = dg
    seed = 0
    # The random model never picks the real EOS; declare a token it does emit as a second
    # EOS (checkpoints list several, e.g. Gemma's <eos> and <turn|>).
    plain = ours(model, ckpt, seed, 2 * CANVAS)[-1].token_ids
    stop_tok = plain[3]
    first = plain.index(stop_tok)
    assert first < CANVAS - 1, "pick a token early in the first canvas"
    eos_ids = [ckpt.config.eos_token_id, stop_tok]
    ckpt = with_generation(ckpt, eos_token_id=eos_ids)
    prompt = fim_prompt_ids(ckpt, *context_ids(ckpt))
    drafts = ours(model, ckpt, seed, 2 * CANVAS)
    assert_same_run(drafts, reference(model, prompt, seed, 2 * CANVAS, eos_token_id=eos_ids))
    final = drafts[-1]
    pad = ckpt.generation_config["pad_token_id"]
    # One canvas only: generation ends with the canvas holding the EOS.
    assert final.token_ids == plain[:first + 1] + [pad] * (CANVAS - first - 1)
    assert final.finish_reason == "stop"
    assert final.text == ckpt.tokenizer.decode(plain[:first])
    assert final.committed == first + 1  # tokens per forward counts the EOS, not the pads


def test_start_canvas_matches_generate_with_decoder_input_ids(dg: tuple[Any, Checkpoint]):
    model, ckpt = dg
    start = ckpt.tokenizer.encode("return n + 1")[:CANVAS]
    start += [ckpt.config.pad_token_id] * (CANVAS - len(start))
    prompt = fim_prompt_ids(ckpt, *context_ids(ckpt))
    drafts = ours(model, ckpt, 5, CANVAS, start_ids=start)
    assert_same_run(drafts, reference(model, prompt, 5, CANVAS,
                                      decoder_input_ids=torch.tensor([start])))


def test_pinned_tokens_stay(dg: tuple[Any, Checkpoint]):
    model, ckpt = dg
    start = ckpt.tokenizer.encode("return fib(n - 1) + fib(n - 2)")[:6]
    pinned = [True, False, True, False, False, True]
    assert len(start) == len(pinned)
    drafts = ours(model, ckpt, 1, CANVAS, start_ids=start, pinned=pinned)
    kept = [i for i, p in enumerate(pinned) if p]
    for d in drafts:
        assert [d.token_ids[i] for i in kept] == [start[i] for i in kept]
    free = ours(model, ckpt, 1, CANVAS, start_ids=start, pinned=[False] * len(start))
    assert free[-1].token_ids != drafts[-1].token_ids


def test_a_restricted_hole_holds_only_the_allowed_tokens(dg: tuple[Any, Checkpoint]):
    model, ckpt = dg
    allowed = frozenset(ckpt.tokenizer.encode("return fib(n - 1)"))
    ends = block_stop_ids(block_settings(ckpt, SamplerSettings()))  # stop and pad
    free = ours(model, ckpt, 1, CANVAS)[-1].token_ids
    kept = ours(model, ckpt, 1, CANVAS, allowed=allowed)[-1].token_ids
    assert not set(free) <= allowed | ends  # random weights: the restriction bites
    assert kept and set(kept) <= allowed | ends


def test_cancel_stops_between_steps(dg: tuple[Any, Checkpoint]):
    model, ckpt = dg
    calls = 0

    def cancel() -> bool:
        nonlocal calls
        calls += 1
        return calls > 3

    # The runner asks `cancel` before every step, in process and in the resident engine.
    prefix_ids, suffix_ids = context_ids(ckpt)
    settings = SamplerSettings(sampler="entropy", gamma=0.1, seed=0)
    steps = denoise_block(model, ckpt, prefix_ids, suffix_ids, 2 * CANVAS, settings)
    seq = Sequence(InfillRequest("", "", 2 * CANVAS), drafts=steps, cancel_check=cancel)
    drafts = list(Runner(model).drafts(seq))
    assert len(drafts) == 4
    assert drafts[-1].done and drafts[-1].finish_reason == "cancelled"
    assert drafts[-1].step == 3


def test_entropy_bound_accepts_lowest_entropy_prefix():
    entropy = torch.tensor([[0.5, 0.01, 0.03, 0.2, 0.04]])
    # Ascending, sum - max: 0.01 (0), 0.03 (0.01), 0.04 (0.04), 0.2 (0.08), 0.5 (0.28 > 0.1).
    assert entropy_bound_accept(entropy, 0.1).tolist() == [[False, True, True, True, True]]
    # The lowest-entropy position is always accepted, however small the bound.
    assert entropy_bound_accept(entropy, 1e-9).tolist() == [[False, True, False, False, False]]


def test_fim_prompt_templates(dg: tuple[Any, Checkpoint]):
    _, ckpt = dg
    tok = ckpt.tokenizer
    prefix_ids, suffix_ids = context_ids(ckpt)
    assert fim_template(ckpt) == FIM_TEMPLATE  # the tiny vocabulary has FIM tokens
    assert fim_prompt_ids(ckpt, prefix_ids, suffix_ids) == (
        [tok.token_id("<|fim_prefix|>")] + prefix_ids + [tok.token_id("<|fim_suffix|>")]
        + suffix_ids + [tok.token_id("<|fim_middle|>")])

    configured = with_generation(ckpt, fim_template="<|file_sep|>{suffix}<|bos|>{prefix}")
    assert fim_prompt_ids(configured, prefix_ids, suffix_ids) == (
        [tok.token_id("<|file_sep|>")] + suffix_ids + [tok.token_id("<|bos|>")] + prefix_ids)

    # A Gemma 4 vocabulary gets the chat turn; the user's code is spliced in as ids, so
    # a "<|turn>" inside it would stay text.
    hf = tiny_tokenizer()
    hf.add_special_tokens(["<bos>", "<|turn>", "<turn|>"])
    gemma = dataclasses.replace(ckpt, tokenizer=Tokenizer(hf))
    assert fim_template(gemma) == GEMMA_CHAT_TEMPLATE
    ids = fim_prompt_ids(gemma, prefix_ids, suffix_ids)
    turn, end = hf.token_to_id("<|turn>"), hf.token_to_id("<turn|>")
    assert ids[:2] == [hf.token_to_id("<bos>"), turn] and ids.count(turn) == 2
    text = gemma.tokenizer.decode(ids)
    assert text.endswith("<|turn>model\n") and PREFIX + "<MISSING>" + SUFFIX + "<turn|>" in text
    assert ids.index(end) > ids.index(turn)


def test_loader_names_the_extra_when_transformers_is_missing(
    dg: tuple[Any, Checkpoint], monkeypatch: pytest.MonkeyPatch
):
    _, ckpt = dg
    monkeypatch.setitem(sys.modules, "transformers", None)  # import now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "dg-lsp\[hf\]"'):
        load_block_model(ckpt, device="cpu")


def test_loader_refuses_pickle_only_folder(dg: tuple[Any, Checkpoint], tmp_path: Path):
    from engine.models.config import CheckpointError

    _, ckpt = dg
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((ckpt.path / name).read_bytes())
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(CheckpointError, match="safetensors"):
        load_block_model(dataclasses.replace(ckpt, path=tmp_path), device="cpu")
