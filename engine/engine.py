"""`Engine`: a loaded model behind one call, `infill(prefix, suffix)`.

    from engine import Engine
    eng = Engine.load("path/or/hub-id", device="cpu")
    res = eng.infill(prefix, suffix, max_tokens=32, sampler="threshold", seed=0)
    for draft in eng.infill_stream(InfillRequest(prefix, suffix, 32)): ...

The family decides how the hole is filled; its decoder (engine.decode.families), chosen once at
load, lays a request's decoding into its `Sequence` (engine.decode.sequence), which the runner
(engine.decode.runner) advances pass by pass: here alone, as a batch of one; in the resident
engine beside other requests. All three families
yield the same Drafts. Engine implements engine.backend.Backend, as the resident engine's
client does.

Threads: an Engine holds no lock. Use it from one thread at a time (the resident server
gives each engine a single worker thread); two concurrent calls would interleave forward
passes on one model, which torch allows but which makes both slower and their timings wrong.
"""

from __future__ import annotations

import dataclasses
import time
from collections import abc
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from engine.backend import EngineInfo
from engine.decode.families import Decoder, decoder_for
from engine.decode.runner import Runner
from engine.decode.sequence import Sequence
from engine.models.config import ModelConfig
from engine.text.canvas import VocabText
from engine.text.stops import completion_ids
from engine.text.tokenizer import Tokenizer
from engine.threads import ThreadPolicy
from engine.types import (
    CANVAS_LENGTH,
    SUFFIX_FRACTION,
    Draft,
    HolesRequest,
    HolesResult,
    InfillRequest,
    InfillResult,
    RewriteRequest,
    SamplerSettings,
    UnitEnd,
    last_draft,
)


class Engine:
    def __init__(
        self,
        model: nn.Module,
        tokenizer: Tokenizer,
        config: ModelConfig | None = None,
        checkpoint: Any = None,
        quantized: bool = False,
        threads: int | None = None,
    ) -> None:
        """Wrap a loaded model; `config` defaults to the model's own (`model.cfg`);
        `quantized`: its linear layers are int8 (see Engine.load); `threads`: see load."""
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config: ModelConfig = config if config is not None else model.cfg
        self.checkpoint = checkpoint  # engine.models.checkpoint.Checkpoint when loaded from disk
        self.device: torch.device = next(model.parameters()).device
        self.quantized = quantized
        # Everything that depends on the model's family, decided here once.
        self.decoder: Decoder = decoder_for(self.config.family)(
            self.model, tokenizer, self.config, checkpoint)
        # Every forward pass of a request runs through it (int8 models never batch), on the
        # CPU with as many threads as the machine's load leaves cores (engine.threads).
        policy = ThreadPolicy.standard(threads) if self.device.type == "cpu" else None
        self.runner = Runner(self.model, batch=not quantized, threads=policy)

    @classmethod
    def load(
        cls,
        path_or_hub_id: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        compile: bool = False,
        threads: int | None = None,
    ) -> Engine:
        """Load a checkpoint folder or a hub id from the local cache (None: the bundled model).

        `dtype`: "auto" (bfloat16 on a GPU; on the CPU float32, with the linear layers of a
        masked-family model quantized to int8, see engine.models.int8), "int8" (CPU only), "int4"
        (weight-only with per-group scales, every family, CPU and CUDA, quantized while
        loading: see engine.models.int4), or a float dtype ("float32" is the exact CPU path).
        `compile`: see `families.compile_model`; with "auto" on the CPU the model then stays
        float32.
        `threads`: the CPU threads of every pass (None: chosen by the machine's load before
        passes, or OMP_NUM_THREADS where set; see engine.threads).
        """
        from engine.models.checkpoint import read_checkpoint, resolve

        if compile and dtype in ("int8", "int4"):
            raise ValueError(f"{dtype} layers do not compile (torch.compile stops at every "
                             "quantized call): use dtype auto or a float dtype with compile")
        ckpt = read_checkpoint(resolve(path_or_hub_id))
        model, quantized = decoder_for(ckpt.config.family).load_model(ckpt, device, dtype, compile)
        return cls(model, ckpt.tokenizer, ckpt.config, checkpoint=ckpt, quantized=quantized,
                   threads=threads)

    @property
    def engine_info(self) -> EngineInfo:
        model = str(self.checkpoint.path) if self.checkpoint is not None else ""
        return EngineInfo(model=model, family=self.config.family, device=str(self.device),
                          resident=False, counts_tokens=True)

    @property
    def vocab(self) -> VocabText:
        """Every token's text (for token healing); built on first use."""
        return self.decoder.vocab

    def forward_logits(self, input_ids: Tensor) -> Tensor:
        """Logits [B, S, V] of the whole sequence, no cache, shifted where the family shifts."""
        return self.decoder.forward_logits(input_ids)

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

    def infill_stream(self, request: InfillRequest, cancel: Callable[[], bool] | None = None,
                      *, stop_early: bool = True, document: str | None = None
                      ) -> Iterator[Draft]:
        """The hole after every forward pass; the last Draft has done=True. `cancel` is
        asked before every pass. `stop_early=False`: stop tokens are forbidden and the hole
        is filled to `max_tokens` (the evaluation's fixed-length protocol). `document` is for
        engines over a wire (engine.backend); one in this process has nothing to route."""
        return self._stream(request, cancel, stop_early=stop_early)

    def rewrite_stream(self, request: RewriteRequest, cancel: Callable[[], bool] | None = None,
                       *, document: str | None = None) -> Iterator[Draft]:
        """Drafts of `request.original` rewritten at `request.strength` (engine.text.remask)."""
        return self._stream(request, cancel)

    def holes_stream(self, request: HolesRequest, cancel: Callable[[], bool] | None = None,
                     *, document: str | None = None) -> Iterator[Draft]:
        """Drafts of the request's holes, denoised jointly where the family can
        (engine.decode.holes); each draft's `holes` holds every hole's committed text."""
        return self._stream(request, cancel)

    def fill_holes(self, texts: abc.Sequence[str], max_tokens: abc.Sequence[int],
                   settings: SamplerSettings | None = None,
                   until: abc.Sequence[UnitEnd | None] | None = None,
                   canvas_length: int = CANVAS_LENGTH,
                   suffix_fraction: float = SUFFIX_FRACTION) -> HolesResult:
        """Fill the holes between `texts` (prefix, the code between the holes, suffix): the
        HolesRequest these arguments make, run to its end."""
        request = HolesRequest(tuple(texts), tuple(max_tokens), settings or SamplerSettings(),
                               canvas_length, suffix_fraction,
                               None if until is None else tuple(until))
        last = last_draft(self.holes_stream(request))
        assert last is not None  # every request ends with a final Draft
        return HolesResult(last.holes, last.step, last.finish_reason)

    def infill(
        self,
        prefix: str,
        suffix: str,
        max_tokens: int = 32,
        sampler: str | None = None,
        seed: int | None = None,
        settings: SamplerSettings | None = None,
        stop_early: bool = True,
        canvas_length: int = CANVAS_LENGTH,
        cancel: Callable[[], bool] | None = None,
        suffix_fraction: float = SUFFIX_FRACTION,
        **sampler_kwargs: Any,
    ) -> InfillResult:
        """Fill the hole between `prefix` and `suffix`: the InfillRequest these arguments
        make, run to its end. `sampler` and `seed` default to `settings`' (else "threshold"
        and 0); other SamplerSettings fields may be given as keywords (threshold=0.8,
        cache_refresh=4, ...)."""
        s = self.sampler_settings(sampler, seed, settings, **sampler_kwargs)
        request = InfillRequest(prefix, suffix, max_tokens, s, canvas_length, suffix_fraction)
        start = time.perf_counter()
        timings: dict[str, float] = {}
        last = last_draft(self._stream(request, cancel, stop_early=stop_early, timings=timings))
        assert last is not None  # every request ends with a final Draft
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

    def sequence(self, request: InfillRequest | RewriteRequest | HolesRequest,
                 cancel: Callable[[], bool] | None = None, deadline: float | None = None,
                 alone: bool = False, **options: Any) -> Sequence:
        """`request` being decoded, for `runner` to step (options: as `Decoder.start`)."""
        seq = Sequence(request, deadline=deadline, cancel_check=cancel, alone=alone)
        return self.start(seq, **options)

    def start(self, seq: Sequence, **options: Any) -> Sequence:
        """`seq` with its request's decoding laid in by the family's decoder (options: as
        `Decoder.start`); no pass is run yet (but a partial rewrite's scoring pass)."""
        return self.decoder.start(seq, **options)

    def _stream(self, request: InfillRequest | RewriteRequest | HolesRequest,
                cancel: Callable[[], bool] | None, **options: Any) -> Iterator[Draft]:
        # A generator: nothing (not even the canvas) is computed until the first draft is
        # asked for, and a request that cannot be laid out raises there.
        yield from self.runner.drafts(self.sequence(request, cancel, **options))

    def completion_ids(self, draft: Draft) -> list[int]:
        """The draft's tokens up to the first stop token or uncommitted position."""
        return completion_ids(draft.token_ids, self.completion_ends())

    def completion_ends(self) -> set[int]:
        """The token ids a completion ends before: the family's stop ids, and the mask id
        uncommitted positions hold (the resident engine sends them to its clients)."""
        mask = self.config.mask_token_id
        return self.decoder.stop_ids() | ({mask} if mask is not None else set())
