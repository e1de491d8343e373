"""One decoder per model family, chosen once when the engine loads (`decoder_for`).

A decoder is everything that depends on the family: how its model is loaded, how the
context and the hole are laid out (`canvas`), how a hole is filled pass by pass (`fill`),
how existing text is rewritten (`rewrite`), which tokens end a completion (`stop_ids`), and
for the masked family the denoiser the resident engine's scheduler steps in batches. The
in-process `Engine` and the scheduler both go through it; nothing else asks which family a
model is.

- MaskedDecoder: a bidirectional denoiser fills a masked hole inside the canvas
  (engine.denoise); rewrites remask the least likely tokens (engine.remask).
- ARDecoder: the causal baseline writes the middle token by token after a FIM prompt
  (engine.ar); it cannot keep tokens inside what it writes, so a rewrite is a fresh infill.
- BlockDecoder: DiffusionGemma denoises canvases after the prompt (engine.models.block);
  rewrites start from the original tokens and renoise a seeded share of them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from engine.ar import FIM_TOKENS, decode_ar
from engine.bounds import STRENGTH_RANGE
from engine.canvas import Canvas, VocabText, completion_text, layout, to_lf
from engine.config import ModelConfig
from engine.denoise import MaskedDenoiser, PrefixCache, denoise
from engine.models.transformer import Transformer, shift_logits
from engine.remask import default_max_tokens, least_likely_kept, seeded_kept
from engine.tokenizer import EOS, Tokenizer
from engine.types import SUFFIX_FRACTION, Draft, SamplerSettings


class Decoder:
    """The family-independent part; subclasses lay out and fill the hole."""

    family = ""

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, config: ModelConfig,
                 checkpoint: Any = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.checkpoint = checkpoint  # engine.checkpoint.Checkpoint when loaded from disk
        # Prefix keys/values shared by successive requests (used with cache_refresh > 1).
        self.prefix_cache = PrefixCache()
        self._vocab: VocabText | None = None

    @classmethod
    def load_model(cls, ckpt: Any, device: str, dtype: str, compile: bool
                   ) -> tuple[nn.Module, bool]:
        """The family's model for checkpoint `ckpt`, and whether its layers are int8."""
        raise NotImplementedError

    @property
    def vocab(self) -> VocabText:
        """Every token's text (for token healing); built on first use."""
        if self._vocab is None:
            self._vocab = VocabText(self.tokenizer)
        return self._vocab

    def stop_ids(self) -> set[int]:
        """The token ids that end a completion of this model (see engine.stops)."""
        return self.config.stop_token_ids

    def canvas(self, prefix: str, suffix: str, max_tokens: int, canvas_length: int,
               suffix_fraction: float = SUFFIX_FRACTION) -> Canvas:
        """The context around a hole of `max_tokens`, cut to the family's share of
        `canvas_length` positions, the suffix's share `suffix_fraction` of the context's."""
        return layout(self.tokenizer, self.config, prefix, suffix, max_tokens, canvas_length,
                      suffix_fraction, vocab=self.vocab)

    def fill(self, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
             stop_early: bool, cancel: Callable[[], bool] | None,
             timings: dict[str, float]) -> Iterator[Draft]:
        """Drafts of `canvas`'s hole after every forward pass; the last has done=True."""
        raise NotImplementedError

    def stream(self, prefix: str, suffix: str, max_tokens: int, settings: SamplerSettings, *,
               stop_early: bool = True, canvas_length: int,
               suffix_fraction: float = SUFFIX_FRACTION,
               cancel: Callable[[], bool] | None = None,
               timings: dict[str, float] | None = None) -> Iterator[Draft]:
        """Lay out the hole between `prefix` and `suffix` and fill it."""
        timings = {} if timings is None else timings
        t0 = time.perf_counter()
        canvas = self.canvas(prefix, suffix, max_tokens, canvas_length, suffix_fraction)
        timings["tokenize"] = time.perf_counter() - t0
        yield from self.fill(canvas, max_tokens, settings, stop_early, cancel, timings)

    def rewrite(self, prefix: str, suffix: str, original: str, *, strength: float,
                max_tokens: int | None, settings: SamplerSettings, canvas_length: int,
                cancel: Callable[[], bool] | None,
                suffix_fraction: float = SUFFIX_FRACTION) -> Iterator[Draft]:
        """Drafts of `original` (the text between prefix and suffix) rewritten at `strength`
        (share of its tokens generated again; 1.0: a fresh infill)."""
        if problem := STRENGTH_RANGE.problem("strength", strength):
            raise ValueError(problem)
        original_ids = self.tokenizer.encode(to_lf(original))
        n = len(original_ids)
        hole_len = max(max_tokens or default_max_tokens(n), n)
        if strength >= 1.0 or n == 0:
            return self.stream(prefix, suffix, hole_len, settings, canvas_length=canvas_length,
                               suffix_fraction=suffix_fraction, cancel=cancel)
        return self.rewrite_kept(prefix, suffix, original_ids, strength, hole_len, settings,
                                 canvas_length, cancel, suffix_fraction)

    def rewrite_kept(self, prefix: str, suffix: str, original_ids: list[int], strength: float,
                     hole_len: int, settings: SamplerSettings, canvas_length: int,
                     cancel: Callable[[], bool] | None,
                     suffix_fraction: float = SUFFIX_FRACTION) -> Iterator[Draft]:
        """A rewrite that keeps part of the original; this default writes it afresh."""
        return self.stream(prefix, suffix, hole_len, settings, canvas_length=canvas_length,
                           suffix_fraction=suffix_fraction, cancel=cancel)

    def denoiser(self, prefix: str, suffix: str, max_tokens: int, canvas_length: int,
                 settings: SamplerSettings, suffix_fraction: float = SUFFIX_FRACTION
                 ) -> MaskedDenoiser | None:
        """A denoiser the scheduler can batch with others' passes; None: the family's holes
        are stepped one by one through `stream`."""
        return None

    def positions(self, canvas_length: int, max_tokens: int) -> int:
        """Positions a request's passes run over: the canvas holds the hole."""
        return canvas_length

    def forward_logits(self, input_ids: Tensor) -> Tensor:
        """Logits [B, S, V] of the whole sequence, no cache, shifted where the family shifts."""
        raise ValueError("forward_logits is for the masked and AR families")


class _TransformerDecoder(Decoder):
    """The families that run engine.models.transformer (masked and AR)."""

    @classmethod
    def load_model(cls, ckpt: Any, device: str, dtype: str, compile: bool
                   ) -> tuple[nn.Module, bool]:
        from engine.checkpoint import load_model, quantize_int8, quantized_on, resolve_device

        int8 = not compile and quantized_on(dtype, resolve_device(device), cls.family)
        model = load_model(ckpt, device, "float32" if int8 else dtype).fuse_projections()
        if int8:
            quantized = quantize_int8(model)
            return quantized, quantized is not model
        return (compile_model(model) if compile else model), False

    def forward_logits(self, input_ids: Tensor) -> Tensor:
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            logits, _ = self.model(input_ids.to(device))
            logits = shift_logits(logits) if self.config.shift_logits else logits
        return logits.clone()  # a normal tensor: callers may edit it in place


class MaskedDecoder(_TransformerDecoder):
    family = "masked"

    def fill(self, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
             stop_early: bool, cancel: Callable[[], bool] | None,
             timings: dict[str, float]) -> Iterator[Draft]:
        return denoise(self.model, self.config, self.tokenizer, canvas, settings,
                       self.stop_ids(), stop_early=stop_early, vocab=self.vocab, cancel=cancel,
                       timings=timings, prefix_cache=self.prefix_cache)

    def denoiser(self, prefix: str, suffix: str, max_tokens: int, canvas_length: int,
                 settings: SamplerSettings, suffix_fraction: float = SUFFIX_FRACTION
                 ) -> MaskedDenoiser:
        canvas = self.canvas(prefix, suffix, max_tokens, canvas_length, suffix_fraction)
        return MaskedDenoiser(self.model, self.config, self.tokenizer, canvas, settings,
                              self.stop_ids(), vocab=self.vocab, prefix_cache=self.prefix_cache)

    def rewrite_kept(self, prefix: str, suffix: str, original_ids: list[int], strength: float,
                     hole_len: int, settings: SamplerSettings, canvas_length: int,
                     cancel: Callable[[], bool] | None,
                     suffix_fraction: float = SUFFIX_FRACTION) -> Iterator[Draft]:
        # No token healing: the hole starts exactly where the original does.
        canvas = layout(self.tokenizer, self.config, prefix, suffix, hole_len, canvas_length,
                        suffix_fraction)
        logits = self.forward_logits(torch.tensor([canvas.ids]))[0]
        start = least_likely_kept(logits, canvas.hole_start, original_ids, strength, hole_len,
                                  self.config.mask_token_id)
        # The scoring pass is a forward pass too: drafts count it.
        for draft in denoise(self.model, self.config, self.tokenizer, canvas, settings,
                             self.stop_ids(), vocab=self.vocab, cancel=cancel, start=start):
            yield dataclasses.replace(draft, step=draft.step + 1)


class ARDecoder(_TransformerDecoder):
    family = "ar"

    def stop_ids(self) -> set[int]:
        eos = self.tokenizer.token_id(EOS)
        return self.config.stop_token_ids | ({eos} if eos is not None else set())

    def canvas(self, prefix: str, suffix: str, max_tokens: int, canvas_length: int,
               suffix_fraction: float = SUFFIX_FRACTION) -> Canvas:
        return layout(self.tokenizer, self.config, prefix, suffix, max_tokens,
                      canvas_length - FIM_TOKENS, suffix_fraction, vocab=self.vocab)

    def fill(self, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
             stop_early: bool, cancel: Callable[[], bool] | None,
             timings: dict[str, float]) -> Iterator[Draft]:
        return decode_ar(self.model, self.config, self.tokenizer, canvas, max_tokens,
                         self.stop_ids(), stop_early=stop_early, vocab=self.vocab,
                         cancel=cancel, timings=timings)


class BlockDecoder(Decoder):
    family = "block"

    def stop_ids(self) -> set[int]:
        from engine.models.block import block_settings, block_stop_ids

        return block_stop_ids(block_settings(self.checkpoint, SamplerSettings()))

    @classmethod
    def load_model(cls, ckpt: Any, device: str, dtype: str, compile: bool
                   ) -> tuple[nn.Module, bool]:
        from engine.models.block import load_block_model

        if dtype == "int8" or compile:
            raise ValueError("dtype 'int8' and compile are for the masked and AR families")
        return load_block_model(ckpt, device, dtype), False

    def canvas(self, prefix: str, suffix: str, max_tokens: int, canvas_length: int,
               suffix_fraction: float = SUFFIX_FRACTION) -> Canvas:
        # The hole is denoised in canvases after the prompt, not inside it: the context
        # gets the whole budget (the one-token hole is a placeholder). The prompt
        # template brings its own BOS, and the block sampler has no first-token
        # constraint, so the cursor's token is not healed.
        return layout(self.tokenizer, self.config, prefix, suffix, 1, canvas_length + 1,
                      suffix_fraction, bos=False)

    def positions(self, canvas_length: int, max_tokens: int) -> int:
        # The hole is denoised after the context, not inside it.
        return canvas_length + max_tokens

    def fill(self, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
             stop_early: bool, cancel: Callable[[], bool] | None,
             timings: dict[str, float]) -> Iterator[Draft]:
        return self._denoise(canvas, max_tokens, settings, cancel)

    def rewrite_kept(self, prefix: str, suffix: str, original_ids: list[int], strength: float,
                     hole_len: int, settings: SamplerSettings, canvas_length: int,
                     cancel: Callable[[], bool] | None,
                     suffix_fraction: float = SUFFIX_FRACTION) -> Iterator[Draft]:
        canvas = self.canvas(prefix, suffix, hole_len, canvas_length, suffix_fraction)
        pinned = seeded_kept(len(original_ids), strength, settings.seed)
        return self._denoise(canvas, hole_len, settings, cancel, original_ids, pinned)

    def _denoise(self, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
                 cancel: Callable[[], bool] | None, start_ids: list[int] | None = None,
                 pinned: list[bool] | None = None) -> Iterator[Draft]:
        from engine.models.block import denoise_block

        prefix_ids, suffix_ids = canvas.context_ids
        for draft in denoise_block(self.model, self.checkpoint, prefix_ids, suffix_ids,
                                   max_tokens, settings, cancel, start_ids=start_ids,
                                   pinned=pinned):
            yield dataclasses.replace(draft, text=completion_text(canvas, draft.text))


DECODERS: dict[str, type[Decoder]] = {
    d.family: d for d in (MaskedDecoder, ARDecoder, BlockDecoder)}


def decoder_for(family: str) -> type[Decoder]:
    """The decoder class of model family `family`."""
    if family not in DECODERS:
        raise ValueError(f"unknown model family '{family}'")
    return DECODERS[family]


def compile_model(model: Transformer) -> Transformer:
    """`model` with its forward compiled by torch.compile (inductor; shapes marked dynamic,
    since canvas, live span and cached lengths change from pass to pass).

    A switch for GPUs, never the default: compiling takes seconds to a minute on the first
    pass of each kind of shape, and on the CPU it does not pay (README, "Performance"); the
    default int8 eager model is faster there, and int8 layers do not compile. Where inductor
    cannot compile (no C++ compiler, an unsupported op) the model runs eagerly rather than
    failing the request.
    """
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True  # a failed compile falls back to eager
    model.forward = torch.compile(model.forward, dynamic=True)  # type: ignore[method-assign]
    return model
