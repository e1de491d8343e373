"""`Engine`: a loaded model behind one call, `infill(prefix, suffix)`.

    from engine import Engine
    eng = Engine.load("path/or/hub-id", device="cpu")
    res = eng.infill(prefix, suffix, max_tokens=32, sampler="threshold", seed=0)
    for draft in eng.infill_stream(prefix, suffix): ...

The family decides how the hole is filled: the masked family denoises a canvas
(engine.denoise), the block family (DiffusionGemma) runs engine.models.block, the AR baseline
decodes token by token (engine.ar). All three yield the same Drafts.

Threads: an Engine holds no lock. Use it from one thread at a time (the resident server
gives each engine a single worker thread); two concurrent calls would interleave forward
passes on one model, which torch allows but which makes both slower and their timings wrong.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from engine.ar import FIM_TOKENS, ar_stop_ids, decode_ar
from engine.canvas import DEFAULT_CANVAS_LENGTH, Canvas, VocabText, layout
from engine.config import ModelConfig
from engine.denoise import PrefixCache, denoise
from engine.models.transformer import Transformer, shift_logits
from engine.tokenizer import Tokenizer
from engine.types import Draft, InfillResult, SamplerSettings


class Engine:
    def __init__(
        self,
        model: nn.Module,
        tokenizer: Tokenizer,
        config: ModelConfig | None = None,
        checkpoint: Any = None,
        quantized: bool = False,
    ) -> None:
        """Wrap a loaded model; `config` defaults to the model's own (`model.cfg`);
        `quantized`: its linear layers are int8 (see Engine.load)."""
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config: ModelConfig = config if config is not None else model.cfg
        self.checkpoint = checkpoint  # engine.checkpoint.Checkpoint when loaded from disk
        self.device: torch.device = next(model.parameters()).device
        self._vocab: VocabText | None = None
        # Prefix keys/values shared by successive requests (used with cache_refresh > 1).
        self.prefix_cache = PrefixCache()
        self.quantized = quantized

    @classmethod
    def load(
        cls,
        path_or_hub_id: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        compile: bool = False,
    ) -> Engine:
        """Load a checkpoint folder or a hub id from the local cache (None: the bundled model).

        `dtype`: "auto" (bfloat16 on a GPU; on the CPU float32, with the linear layers of a
        masked-family model quantized to int8, see `quantize_int8`), "int8", or a float dtype
        ("float32" is the exact CPU path). `compile`: see `compile_model`; with "auto" on the
        CPU the model then stays float32.
        """
        from engine.checkpoint import (
            load_model,
            quantize_int8,
            quantized_on,
            read_checkpoint,
            resolve,
            resolve_device,
        )

        if compile and dtype == "int8":
            raise ValueError("int8 layers do not compile (torch.compile stops at every "
                             "quantized call): use dtype auto or a float dtype with compile")
        ckpt = read_checkpoint(resolve(path_or_hub_id))
        quantized = False
        if ckpt.config.family == "block":
            from engine.models.block import load_block_model

            if dtype == "int8" or compile:
                raise ValueError("dtype 'int8' and compile are for the masked and AR families")
            model = load_block_model(ckpt, device, dtype)
        else:
            int8 = not compile and quantized_on(dtype, resolve_device(device),
                                                ckpt.config.family)
            model = load_model(ckpt, device, "float32" if int8 else dtype).fuse_projections()
            if int8:
                float_model, model = model, quantize_int8(model)
                quantized = model is not float_model
            elif compile:
                model = compile_model(model)
        return cls(model, ckpt.tokenizer, ckpt.config, checkpoint=ckpt, quantized=quantized)

    @property
    def vocab(self) -> VocabText:
        """Every token's text (for token healing); built on first use."""
        if self._vocab is None:
            self._vocab = VocabText(self.tokenizer)
        return self._vocab

    def forward_logits(self, input_ids: Tensor) -> Tensor:
        """Logits [B, S, V] of the whole sequence, no cache, shifted where the family shifts."""
        if self.config.family == "block":
            raise ValueError("forward_logits is for the masked and AR families")
        with torch.inference_mode():
            logits, _ = self.model(input_ids.to(self.device))
            logits = shift_logits(logits) if self.config.shift_logits else logits
        return logits.clone()  # a normal tensor: callers may edit it in place

    def sampler_settings(
        self,
        sampler: str | None = None,
        seed: int | None = None,
        settings: SamplerSettings | None = None,
        **sampler_kwargs: Any,
    ) -> SamplerSettings:
        """`settings` (or the defaults) with the explicitly given fields replaced."""
        updates = dict(sampler_kwargs)
        if sampler is not None:
            updates["sampler"] = sampler
        if seed is not None:
            updates["seed"] = seed
        return dataclasses.replace(settings or SamplerSettings(), **updates)

    def infill_stream(
        self,
        prefix: str,
        suffix: str,
        max_tokens: int = 32,
        sampler: str | None = None,
        seed: int | None = None,
        settings: SamplerSettings | None = None,
        stop_early: bool = True,
        canvas_length: int = DEFAULT_CANVAS_LENGTH,
        cancel: Callable[[], bool] | None = None,
        **sampler_kwargs: Any,
    ) -> Iterator[Draft]:
        """The hole after every forward pass; the last Draft has done=True.

        `sampler` and `seed` default to `settings`' (else "threshold" and 0); other
        SamplerSettings fields may be given as keywords (threshold=0.8, cache_refresh=4, ...).
        """
        s = self.sampler_settings(sampler, seed, settings, **sampler_kwargs)
        yield from self._run(prefix, suffix, max_tokens, s, stop_early, canvas_length, cancel, {})

    def infill(
        self,
        prefix: str,
        suffix: str,
        max_tokens: int = 32,
        sampler: str | None = None,
        seed: int | None = None,
        settings: SamplerSettings | None = None,
        stop_early: bool = True,
        canvas_length: int = DEFAULT_CANVAS_LENGTH,
        cancel: Callable[[], bool] | None = None,
        **sampler_kwargs: Any,
    ) -> InfillResult:
        """Fill the hole between `prefix` and `suffix` (arguments as for `infill_stream`)."""
        s = self.sampler_settings(sampler, seed, settings, **sampler_kwargs)
        start = time.perf_counter()
        timings: dict[str, float] = {}
        last: Draft | None = None
        for draft in self._run(prefix, suffix, max_tokens, s, stop_early, canvas_length, cancel,
                               timings):
            last = draft
        assert last is not None  # every family yields a final Draft
        token_ids = self.completion_ids(last)
        timings["total"] = time.perf_counter() - start
        return InfillResult(
            text=last.text,
            token_ids=token_ids,
            steps=last.step,
            tokens=len(token_ids),
            tokens_per_step=len(token_ids) / last.step if last.step else 0.0,
            finish_reason=last.finish_reason,
            timings=timings,
        )

    def rewrite_stream(
        self,
        prefix: str,
        suffix: str,
        original: str,
        *,
        strength: float = 1.0,
        max_tokens: int | None = None,
        settings: SamplerSettings | None = None,
        canvas_length: int = DEFAULT_CANVAS_LENGTH,
        cancel: Callable[[], bool] | None = None,
    ) -> Iterator[Draft]:
        """Drafts of `original` (the text between prefix and suffix) rewritten at `strength`
        (share of its tokens generated again; 1.0: fresh infill). See engine.remask."""
        from engine.remask import rewrite_stream

        return rewrite_stream(self, prefix, suffix, original, strength=strength,
                              max_tokens=max_tokens, settings=settings or SamplerSettings(),
                              canvas_length=canvas_length, cancel=cancel)

    def completion_ids(self, draft: Draft) -> list[int]:
        """The draft's tokens up to the first stop token or uncommitted position."""
        stop = self.config.stop_token_ids
        if self.config.family == "ar":
            stop = ar_stop_ids(self.config, self.tokenizer)
        ids = []
        for t in draft.token_ids:
            if t in stop or t == self.config.mask_token_id:
                break
            ids.append(t)
        return ids

    def _canvas(
        self, prefix: str, suffix: str, max_tokens: int, canvas_length: int
    ) -> Canvas:
        family = self.config.family
        if family == "ar":
            return layout(self.tokenizer, self.config, prefix, suffix, max_tokens,
                          canvas_length - FIM_TOKENS, vocab=self.vocab)
        if family == "block":
            # The hole is denoised in canvases after the prompt, not inside it: the context
            # gets the whole budget (the one-token hole is a placeholder). The prompt
            # template brings its own BOS, and the block sampler has no first-token
            # constraint, so the cursor's token is not healed.
            return layout(self.tokenizer, self.config, prefix, suffix, 1, canvas_length + 1,
                          bos=False)
        return layout(self.tokenizer, self.config, prefix, suffix, max_tokens, canvas_length,
                      vocab=self.vocab)

    def _run(
        self,
        prefix: str,
        suffix: str,
        max_tokens: int,
        settings: SamplerSettings,
        stop_early: bool,
        canvas_length: int,
        cancel: Callable[[], bool] | None,
        timings: dict[str, float],
    ) -> Iterator[Draft]:
        t0 = time.perf_counter()
        canvas = self._canvas(prefix, suffix, max_tokens, canvas_length)
        timings["tokenize"] = time.perf_counter() - t0
        family = self.config.family
        if family == "masked":
            yield from denoise(self.model, self.config, self.tokenizer, canvas, settings,
                               stop_early=stop_early, vocab=self.vocab, cancel=cancel,
                               timings=timings, prefix_cache=self.prefix_cache)
        elif family == "ar":
            yield from decode_ar(self.model, self.config, self.tokenizer, canvas, max_tokens,
                                 stop_early=stop_early, vocab=self.vocab, cancel=cancel,
                                 timings=timings)
        elif family == "block":
            from engine.models.block import denoise_block

            prefix_ids, suffix_ids = canvas.context_ids
            for draft in denoise_block(self.model, self.checkpoint, prefix_ids, suffix_ids,
                                       max_tokens, settings, cancel):
                if canvas.crlf:
                    draft = dataclasses.replace(draft, text=draft.text.replace("\n", "\r\n"))
                yield draft
        else:
            raise ValueError(f"unknown model family '{family}'")


def compile_model(model: Transformer) -> Transformer:
    """`model` with its forward compiled by torch.compile (inductor; shapes marked dynamic,
    since canvas, live span and cached lengths change from pass to pass).

    A switch for GPUs, never the default: compiling takes seconds to a minute on the first
    pass of each kind of shape, and on the CPU it does not pay. Bundled model, 2-core CPU:
    float32 full pass 43 ms eager, 49 ms compiled; cached pass over 8 tokens 9.3 -> 7.6 ms;
    the default int8 eager model does both faster (28 and 5.8 ms), and int8 layers do not
    compile. Where inductor cannot compile (no C++ compiler, an unsupported op) the model
    runs eagerly rather than failing the request.
    """
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True  # a failed compile falls back to eager
    model.forward = torch.compile(model.forward, dynamic=True)  # type: ignore[method-assign]
    return model
