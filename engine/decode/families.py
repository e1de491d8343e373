"""One decoder per model family, chosen once when the engine loads (`decoder_for`).

A decoder is everything that depends on the family: how its model is loaded, how the
context and the hole are laid out (`canvas`), and how a request is decoded pass by pass:
`start` lays an InfillRequest's or a RewriteRequest's decoding into its `Sequence`
(engine.decode.sequence), which the runner (engine.decode.runner) advances, alone in process
or beside other requests in the resident engine's scheduler. Which tokens end a completion is
`stop_ids`. Nothing else asks which family a model is.

- MaskedDecoder: a bidirectional denoiser fills a masked hole inside the canvas
  (engine.decode.denoise); rewrites remask the least likely tokens (engine.text.remask).
- ARDecoder: the causal baseline writes the middle token by token after a FIM prompt
  (engine.decode.ar); it cannot keep tokens inside what it writes, so a rewrite is a fresh infill.
- BlockDecoder: DiffusionGemma denoises canvases after the prompt (engine.models.block);
  rewrites start from the original tokens and renoise a seeded share of them.

A request with several holes (HolesRequest) is denoised jointly in one canvas by the masked
family and filled one hole after another by the others (`holes`, engine.decode.holes).
"""

from __future__ import annotations

import dataclasses
import time
from collections import abc
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from engine.bounds import STRENGTH_RANGE, holes_problem
from engine.decode.ar import FIM_TOKENS, decode_ar
from engine.decode.denoise import begin, begin_holes
from engine.decode.holes import sequential_holes, units_of
from engine.decode.kv_cache import PrefixCache
from engine.decode.sequence import Sequence
from engine.models.config import ModelConfig
from engine.models.transformer import Transformer, shift_logits
from engine.text.canvas import Canvas, VocabText, completion_text, holes_layout, layout, to_lf
from engine.text.choices import Choices
from engine.text.remask import default_max_tokens, least_likely_kept, seeded_kept
from engine.text.tokenizer import EOS, Tokenizer
from engine.types import Draft, HolesRequest, InfillRequest, RewriteRequest, SamplerSettings

# What a decoder lays out a canvas from: either request has prefix, suffix, canvas_length and
# suffix_fraction.
Request = InfillRequest | RewriteRequest


class Decoder:
    """The family-independent part; subclasses lay out and fill the hole."""

    family = ""

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, config: ModelConfig,
                 checkpoint: Any = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.checkpoint = checkpoint  # engine.models.checkpoint.Checkpoint when loaded from disk
        # Prefix keys/values shared by successive requests (used with cache_refresh > 1).
        self.prefix_cache = PrefixCache()
        self._vocab: VocabText | None = None

    @classmethod
    def load_model(cls, ckpt: Any, device: str, dtype: str, compile: bool
                   ) -> tuple[nn.Module, bool]:
        """The family's model for checkpoint `ckpt`, and whether its layers are int8 (dynamic
        quantization: such a model never batches; int4 layers batch as float ones)."""
        raise NotImplementedError

    @property
    def vocab(self) -> VocabText:
        """Every token's text (for token healing); built on first use."""
        if self._vocab is None:
            self._vocab = VocabText(self.tokenizer)
        return self._vocab

    def stop_ids(self) -> set[int]:
        """The token ids that end a completion of this model (see engine.text.stops)."""
        return self.config.stop_token_ids

    def canvas(self, request: Request, hole: int) -> Canvas:
        """The context around a hole of `hole` tokens, cut to the family's share of the
        request's `canvas_length` positions, the suffix's share its `suffix_fraction` of the
        context's."""
        return layout(self.tokenizer, self.config, request.prefix, request.suffix, hole,
                      request.canvas_length, request.suffix_fraction, vocab=self.vocab)

    def start(self, seq: Sequence, *, stop_early: bool = True,
              timings: dict[str, float] | None = None) -> Sequence:
        """`seq` with its request's decoding laid in: its canvas laid out, no pass run yet (but
        a partial rewrite's scoring pass); a HolesRequest's holes as `holes` fills them.
        `stop_early=False`: stop tokens are forbidden and the hole is filled to `max_tokens`
        (the evaluation's fixed-length protocol). `timings` collects seconds per stage."""
        self._start(seq, seq.request, stop_early, {} if timings is None else timings)
        return seq

    def _start(self, seq: Sequence, request: Request | HolesRequest, stop_early: bool,
               timings: dict[str, float]) -> None:
        if isinstance(request, HolesRequest):
            self.check_holes(request)
            return self.holes(seq, request, timings)
        if isinstance(request, RewriteRequest):
            return self._rewrite(seq, request, timings)
        t0 = time.perf_counter()
        canvas = self.canvas(request, request.max_tokens)
        if request.choices is not None and request.judge:
            seq.judged = Choices(tuple(tuple(ids) for ids in self.tokenize_choices(
                request.choices, canvas.heal_text)), frozenset(self.choice_ends()))
        elif request.choices is not None:
            choices = self.choices(request.choices, canvas.heal_text, canvas.hole_len)
            grow = {i for i in (self.config.expand_token_id,) if i is not None}
            canvas = dataclasses.replace(canvas, allowed=choices.tokens | grow, choices=choices)
        elif request.judge:
            raise ValueError("a judged request needs choices")
        timings["tokenize"] = time.perf_counter() - t0
        return self.fill(seq, canvas, request.max_tokens, request.settings, stop_early, timings)

    def choices(self, texts: abc.Sequence[str], heal_text: str, room: int) -> Choices:
        """A hole restricted to one of `texts` or nothing, each ended by the tokens that end a
        hole (stop, pad). The hole's text starts with the healed text (engine.text.canvas). A text
        of more than `room` tokens is left out: begun, it could not be finished."""
        sequences = self.tokenize_choices(texts, heal_text)
        if heal_text:
            sequences.append(self.tokenizer.encode(heal_text))
        return Choices.of((s for s in sequences if len(s) <= room), self.choice_ends())

    def tokenize_choices(self, texts: abc.Sequence[str], heal_text: str) -> list[list[int]]:
        """Each text's tokens as the hole would hold it (after the healed text)."""
        return [self.tokenizer.encode(heal_text + to_lf(text)) for text in texts]

    def choice_ends(self) -> set[int]:
        """The tokens that end a hole of choices: the stop tokens, pad and EOS."""
        ends = self.stop_ids() | self.config.stop_token_ids
        return ends | {i for i in (self.config.pad_token_id, self.config.eos_token_id)
                       if i is not None}

    def fill(self, seq: Sequence, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
             stop_early: bool, timings: dict[str, float]) -> None:
        """Lay into `seq` the decoding that fills `canvas`'s hole."""
        raise NotImplementedError

    def holes(self, seq: Sequence, request: HolesRequest, timings: dict[str, float]) -> None:
        """Lay into `seq` the decoding that fills a request's holes; this default fills them
        one after another (engine.decode.holes.sequential_holes)."""
        seq.drafts = sequential_holes(self, request)

    def check_holes(self, request: HolesRequest) -> None:
        """ValueError when `request` is not one this decoder can lay out (the wrong number of
        texts or units, holes out of range, the code between them too long for its canvas);
        no pass is run."""
        if problem := holes_problem(len(request.texts), request.max_tokens):
            raise ValueError(problem)
        units_of(request)
        holes_layout(self.tokenizer, self.config, request.texts, request.max_tokens,
                     request.canvas_length, request.suffix_fraction)

    def _rewrite(self, seq: Sequence, request: RewriteRequest, timings: dict[str, float]
                 ) -> None:
        if problem := STRENGTH_RANGE.problem("strength", request.strength):
            raise ValueError(problem)
        original_ids = self.tokenizer.encode(to_lf(request.original))
        n = len(original_ids)
        hole_len = max(request.max_tokens or default_max_tokens(n), n)
        if request.strength >= 1.0 or n == 0:
            return self._start(seq, request.afresh(hole_len), True, timings)
        return self.rewrite_kept(seq, request, original_ids, hole_len)

    def rewrite_kept(self, seq: Sequence, request: RewriteRequest, original_ids: list[int],
                     hole_len: int) -> None:
        """A rewrite that keeps part of the original; this default writes it afresh."""
        self._start(seq, request.afresh(hole_len), True, {})

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
        from engine.models.checkpoint import load_model, quantized_on, resolve_device
        from engine.models.config import CheckpointError
        from engine.models.int4 import DEFAULT_GROUP_SIZE, pack_int4
        from engine.models.int8 import load_int8
        from engine.models.quantized import load_quantized, quantization_of

        scheme = None if compile else quantized_on(dtype, resolve_device(device), cls.family)
        written = quantization_of(ckpt.path)  # by dg-engine quantize
        if written is not None and scheme != "int4":
            raise CheckpointError(f"{ckpt.path}: holds int4 weights (dg-engine quantize); load "
                                  "it with dtype int4")
        if scheme == "int4":
            # Quantized while loading, or as written; the float tensors around the int4 layers
            # (embedding, norms) in the device's default dtype.
            model = (load_quantized(ckpt, device, written["group_size"]) if written else
                     load_model(ckpt, device, "auto", DEFAULT_GROUP_SIZE))
            # Activations stay float: an int4 model batches as a float one does.
            return pack_int4(model.fuse_projections()), False
        if scheme == "int8":  # CPU only; built a layer at a time (engine.models.int8)
            return load_int8(ckpt)
        model = load_model(ckpt, device, dtype).fuse_projections()
        return (compile_model(model) if compile else model), False

    def forward_logits(self, input_ids: Tensor) -> Tensor:
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            logits, _ = self.model(input_ids.to(device))
            logits = shift_logits(logits) if self.config.shift_logits else logits
        return logits.clone()  # a normal tensor: callers may edit it in place


class MaskedDecoder(_TransformerDecoder):
    family = "masked"

    def fill(self, seq: Sequence, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
             stop_early: bool, timings: dict[str, float]) -> None:
        begin(seq, self.model, self.config, self.tokenizer, canvas, settings, self.stop_ids(),
              stop_early=stop_early, vocab=self.vocab, timings=timings,
              prefix_cache=self.prefix_cache)

    def holes(self, seq: Sequence, request: HolesRequest, timings: dict[str, float]) -> None:
        if self.config.expand_token_id is not None:
            # DreamOn's holes grow and shrink, moving the code kept between them: one after
            # another, each grows as a single hole does.
            return super().holes(seq, request, timings)
        t0 = time.perf_counter()
        layout = holes_layout(self.tokenizer, self.config, request.texts, request.max_tokens,
                              request.canvas_length, request.suffix_fraction, vocab=self.vocab)
        timings["tokenize"] = time.perf_counter() - t0
        begin_holes(seq, self.model, self.config, self.tokenizer, layout, request.settings,
                    self.stop_ids(), vocab=self.vocab, texts=request.texts,
                    units=units_of(request), timings=timings, prefix_cache=self.prefix_cache)

    def rewrite_kept(self, seq: Sequence, request: RewriteRequest, original_ids: list[int],
                     hole_len: int) -> None:
        # No token healing: the hole starts exactly where the original does.
        canvas = layout(self.tokenizer, self.config, request.prefix, request.suffix, hole_len,
                        request.canvas_length, request.suffix_fraction)
        logits = self.forward_logits(torch.tensor([canvas.ids]))[0]
        start = least_likely_kept(logits, canvas.hole_start, original_ids, request.strength,
                                  hole_len, self.config.mask_token_id)
        # The scoring pass is a forward pass too: drafts count it.
        begin(seq, self.model, self.config, self.tokenizer, canvas, request.settings,
              self.stop_ids(), vocab=self.vocab, start=start, passes_before=1)


class ARDecoder(_TransformerDecoder):
    family = "ar"

    def stop_ids(self) -> set[int]:
        eos = self.tokenizer.token_id(EOS)
        return self.config.stop_token_ids | ({eos} if eos is not None else set())

    def canvas(self, request: Request, hole: int) -> Canvas:
        return layout(self.tokenizer, self.config, request.prefix, request.suffix, hole,
                      request.canvas_length - FIM_TOKENS, request.suffix_fraction,
                      vocab=self.vocab)

    def fill(self, seq: Sequence, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
             stop_early: bool, timings: dict[str, float]) -> None:
        seq.drafts = decode_ar(self.model, self.config, self.tokenizer, canvas, max_tokens,
                               self.stop_ids(), stop_early=stop_early, vocab=self.vocab,
                               timings=timings)


class BlockDecoder(Decoder):
    family = "block"

    def stop_ids(self) -> set[int]:
        from engine.models.block import block_settings, block_stop_ids

        return block_stop_ids(block_settings(self.checkpoint, SamplerSettings()))

    @classmethod
    def load_model(cls, ckpt: Any, device: str, dtype: str, compile: bool
                   ) -> tuple[nn.Module, bool]:
        from engine.models.block import load_block_model
        from engine.models.config import CheckpointError
        from engine.models.int4 import DEFAULT_GROUP_SIZE
        from engine.models.quantized import load_quantized_block, quantization_of

        if compile:
            raise ValueError("compile is for the masked and AR families")
        if dtype == "int8":
            # Dynamic quantization reaches nn.Linear only, not DiffusionGemma's experts (3-D
            # parameters, most of its weights).
            raise ValueError("dtype 'int8' is for the masked and AR families; the block "
                             "family quantizes with 'int4'")
        written = quantization_of(ckpt.path)  # by dg-engine quantize
        if written is not None and dtype != "int4":
            raise CheckpointError(f"{ckpt.path}: holds int4 weights (dg-engine quantize); load "
                                  "it with dtype int4")
        if written is not None:
            return load_quantized_block(ckpt, device, written["group_size"]), False
        if dtype == "int4":
            return load_block_model(ckpt, device, "auto", DEFAULT_GROUP_SIZE), False
        return load_block_model(ckpt, device, dtype), False

    def canvas(self, request: Request, hole: int) -> Canvas:
        # The hole is denoised in canvases after the prompt, not inside it: the context
        # gets the whole budget (the one-token hole is a placeholder). The prompt
        # template brings its own BOS, and the block sampler has no first-token
        # constraint, so the cursor's token is not healed.
        return layout(self.tokenizer, self.config, request.prefix, request.suffix, 1,
                      request.canvas_length + 1, request.suffix_fraction, bos=False)

    def positions(self, canvas_length: int, max_tokens: int) -> int:
        # The hole is denoised after the context, not inside it.
        return canvas_length + max_tokens

    def fill(self, seq: Sequence, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
             stop_early: bool, timings: dict[str, float]) -> None:
        seq.drafts = self._denoise(canvas, max_tokens, settings)

    def rewrite_kept(self, seq: Sequence, request: RewriteRequest, original_ids: list[int],
                     hole_len: int) -> None:
        canvas = self.canvas(request, hole_len)
        pinned = seeded_kept(len(original_ids), request.strength, request.settings.seed)
        seq.drafts = self._denoise(canvas, hole_len, request.settings, original_ids, pinned)

    def _denoise(self, canvas: Canvas, max_tokens: int, settings: SamplerSettings,
                 start_ids: list[int] | None = None, pinned: list[bool] | None = None
                 ) -> Iterator[Draft]:
        from engine.models.block import denoise_block

        prefix_ids, suffix_ids = canvas.context_ids
        for draft in denoise_block(self.model, self.checkpoint, prefix_ids, suffix_ids,
                                   max_tokens, settings, start_ids=start_ids, pinned=pinned,
                                   allowed=canvas.allowed):
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
    pass of each kind of shape, and on the CPU it does not pay (docs/performance.md); the
    default int8 eager model is faster there, and int8 layers do not compile. Where inductor
    cannot compile (no C++ compiler, an unsupported op) the model runs eagerly rather than
    failing the request.
    """
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True  # a failed compile falls back to eager
    model.forward = torch.compile(model.forward, dynamic=True)  # type: ignore[method-assign]
    return model
