"""The block family: DiffusionGemma behind the engine's interface.

DiffusionGemma is an encoder-decoder over one set of weights. The encoder runs causally over
the prompt and writes a KV cache; the decoder reads that cache and denoises a canvas of
`config.canvas_length` tokens bidirectionally. There is no mask token: the canvas starts as
uniform random tokens, and every step re-randomizes the positions the sampler did not accept.

The model itself is transformers' `DiffusionGemmaForBlockDiffusion` (the reference, loaded
from safetensors, never with remote code). The denoising loop is ours and written out below,
so the engine can stream a draft per step, cancel between steps and pin tokens for "rewrite
selection". With pinning off it reproduces `DiffusionGemmaForBlockDiffusion.generate` token
for token under the same seed: it draws random numbers in the same order (canvas noise, then
per step one multinomial draw over the canvas and one renoising draw).

Infill. Nothing after the canvas conditions it, so prefix and suffix both go into the prompt
as a fill-in-the-middle request and the canvas holds the middle. The request is a template
string with `{prefix}` and `{suffix}`, chosen in this order:

1. the `template` argument of `denoise_block`;
2. `"fim_template"` in the checkpoint's generation_config.json (per-model configuration);
3. the tokenizer's Gemma 4 chat turns (`<|turn>` / `<turn|>`), as the instruction-tuned
   DiffusionGemma checkpoints expect: a user turn asking for the missing code, then the
   opening of the model turn, so the canvas is the model's answer (GEMMA_CHAT_TEMPLATE);
4. the tokenizer's FIM tokens in prefix-suffix-middle order (FIM_TEMPLATE);
5. a plain instruction (PLAIN_TEMPLATE).

Special tokens written in a template are recognized; prefix and suffix arrive as token ids
and are spliced in as they are, so code that happens to contain `<|turn>` stays text.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from engine.decode.samplers import allowed_mask
from engine.models.checkpoint import CONVERT_CHUNK_BYTES, FLOAT_DTYPES
from engine.models.config import CheckpointError
from engine.models.int4 import Int4Linear
from engine.text.stops import completion_ids
from engine.types import Draft, SamplerSettings

if TYPE_CHECKING:
    from engine.models.checkpoint import Checkpoint

MADV_DONTNEED = 4  # <sys/mman.h> on Linux

HF_HINT = 'the block family (DiffusionGemma) runs on transformers: pip install "dg-lsp[hf]"'

GEMMA_CHAT_TEMPLATE = (
    "<bos><|turn>user\n"
    "Fill in the code at <MISSING>. Reply with the missing code only, exactly as it "
    "belongs at that spot, without the code around it and without markdown.\n\n"
    "{prefix}<MISSING>{suffix}<turn|>\n"
    "<|turn>model\n"
)
FIM_TEMPLATE = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
PLAIN_TEMPLATE = (
    "Fill in the code at <MISSING>. Reply with the missing code only.\n\n"
    "{prefix}<MISSING>{suffix}\n\nMissing code:\n"
)

# generate()'s global defaults (DiffusionGemmaGenerationConfig._get_default_generation_params),
# used where the checkpoint's generation_config.json is silent.
DEFAULT_MAX_STEPS = 48
DEFAULT_ENTROPY_BOUND = 0.1
DEFAULT_T_MIN = 0.4
DEFAULT_T_MAX = 0.8
DEFAULT_STABILITY = 1
DEFAULT_CONFIDENCE = 0.005


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as e:
        raise ImportError(HF_HINT) from e
    if not hasattr(transformers, "DiffusionGemmaForBlockDiffusion"):
        raise ImportError(f"transformers {transformers.__version__} has no DiffusionGemma "
                          f"(it arrived in 5.12); {HF_HINT}")
    return transformers


def load_block_model(ckpt: Checkpoint, device: str = "auto", dtype: str = "auto",
                     int4_group: int | None = None, pack: bool = True) -> Any:
    """`DiffusionGemmaForBlockDiffusion` from the checkpoint folder, on device/dtype, in eval mode.

    Safetensors only, local files only, no remote code. With `int4_group`, the linear layers
    and the experts get int4 weights in groups of that size (engine.models.int4), `dtype`
    being the float one around them; see `_quantize_while_loading`. `pack`: False leaves
    them in the dequantizing layout (what dg-engine quantize writes).
    """
    from engine.models.checkpoint import resolve_device, resolve_dtype, weight_files

    tf = _transformers()
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    # Also refuses pickle-only folders with the reason, before transformers does.
    stored = stored_dtype(weight_files(ckpt.path)) or dt
    try:
        # In the stored dtype the weights stay memory-mapped (nothing is read yet); asked for
        # another dtype, transformers would keep every converted tensor's mapped pages
        # resident until the whole load ends (the peak: docs/models.md, real scale).
        model = tf.DiffusionGemmaForBlockDiffusion.from_pretrained(
            str(ckpt.path), dtype=stored, use_safetensors=True,
            local_files_only=True, trust_remote_code=False,
        )
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{ckpt.path}: cannot load DiffusionGemma weights ({e})") from e
    if int4_group is not None:
        _quantize_while_loading(model, int4_group, dev, dt, pack)
    if dt != stored:
        if dev.type == "cpu":
            convert_releasing_pages(model, dt)
        exact_buffers(model, dt)
    # `device_map` would need accelerate; moving after loading needs nothing extra.
    return model.to(dev).eval()


def _quantize_while_loading(model: torch.nn.Module, group_size: int, device: torch.device,
                            dtype: torch.dtype, pack: bool = True) -> None:
    """Quantize `model`'s matrices to int4 on `device`, a matrix (an expert) at a time,
    straight from the memory-mapped stored weights, giving each one's pages back once it is
    quantized: neither the host nor the device ever holds the model's 16-bit matrices, only
    the one being quantized. What stays in float (the embedding, which is also the head and
    the self-conditioning's matrix; norms; the router's scales) is converted afterwards."""
    from engine.models.int4 import quantize_int4

    with torch.no_grad():
        quantize_int4(model, group_size, device, dtype, release=_release_pages, use_ops=pack)


def stored_dtype(files: dict[str, Any]) -> torch.dtype | None:
    """The dtype the checkpoint stores its weights in (its first floating-point tensor's)."""
    from safetensors import safe_open

    for name, file in files.items():
        with safe_open(str(file), framework="pt") as f:
            found = FLOAT_DTYPES.get(f.get_slice(name).get_dtype())
        if found is not None:
            return found
    return None


def convert_releasing_pages(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Every floating-point parameter and buffer of `model` in `dtype`, one at a time, giving
    each memory-mapped original's pages back to the kernel once its copy exists.

    The originals are views of one mapping per file, which stays mapped until the last of them
    is freed, so without the release every page read for a conversion would stay counted in
    the process's memory until the end. The pages are clean file pages: `madvise(DONTNEED)`
    drops them, and a later read of the same bytes would load them from the file again."""
    owners: dict[int, int] = {}
    params = {id(p): p for p in model.parameters()}.values()
    for p in params:
        key = p.untyped_storage().data_ptr()
        owners[key] = owners.get(key, 0) + 1
    with torch.no_grad():
        for p in params:
            if not p.is_floating_point() or p.dtype == dtype:
                continue
            old = p.data
            # Storage shared with another parameter: its pages may still be read from.
            release = owners[old.untyped_storage().data_ptr()] == 1 and old.is_contiguous()
            if not release or old.dim() == 0:
                p.data = old.to(dtype)
                continue
            # Row blocks: the largest tensor (the embedding) is most of a small model.
            new = torch.empty(old.shape, dtype=dtype, device=old.device)
            rows = max(1, CONVERT_CHUNK_BYTES // max(1, old[0].numel() * old.element_size()))
            for first in range(0, old.shape[0], rows):
                new[first:first + rows].copy_(old[first:first + rows])
                _release_pages(old[first:first + rows])
            p.data = new
        for module in model.modules():
            if isinstance(module, Int4Linear):
                continue  # its scales are in the dtype its matmul takes
            for key, buf in module._buffers.items():
                if buf is not None and buf.is_floating_point():
                    module._buffers[key] = buf.to(dtype)


def exact_buffers(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Give `model` the non-persistent buffers a model built in `dtype` has.

    They are computed at construction in the default dtype (DiffusionGemma's embedding scale
    is sqrt(hidden_size)), so a model loaded in bfloat16 and converted keeps their bfloat16
    rounding, and float32 logits drift from a float32 model's (docs/models.md). They come
    from a skeleton built in `dtype`, whose weights are allocated but never written, so never
    resident."""
    skeleton = block_skeleton(type(model), model.config, dtype)
    persistent = set(model.state_dict())
    for name, buf in skeleton.named_buffers():
        if name not in persistent:
            owner, _, attr = name.rpartition(".")
            model.get_submodule(owner)._buffers[attr] = buf
    del skeleton


def block_skeleton(model_cls: Any, config: Any, dtype: torch.dtype) -> Any:
    """`model_cls(config)` built in `dtype`, its weights allocated but never written (so never
    resident), its non-persistent buffers computed as a model built in `dtype` has them."""
    from transformers.initialization import no_init_weights

    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with no_init_weights():
            return model_cls(config)
    finally:
        torch.set_default_dtype(default)


def _release_pages(tensor: Tensor) -> None:
    """Drop the whole pages inside `tensor`'s bytes from this process (Linux only)."""
    if not sys.platform.startswith("linux") or tensor.device.type != "cpu":
        return
    page = mmap.PAGESIZE
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    first, last = -(-start // page) * page, end // page * page
    if last > first:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), MADV_DONTNEED)


# ---------------------------------------------------------------------------------------------
# The prompt


def fim_template(ckpt: Checkpoint, template: str | None = None) -> str:
    """The FIM request template for this checkpoint (see the module docstring for the order)."""
    if template is not None:
        return template
    configured = (ckpt.generation_config or {}).get("fim_template")
    if isinstance(configured, str):
        return configured
    tok = ckpt.tokenizer
    if tok.token_id("<|turn>") is not None and tok.token_id("<turn|>") is not None:
        return GEMMA_CHAT_TEMPLATE
    if all(tok.token_id(t) is not None for t in ("<|fim_prefix|>", "<|fim_suffix|>",
                                                   "<|fim_middle|>")):
        return FIM_TEMPLATE
    return PLAIN_TEMPLATE


def fim_prompt_ids(
    ckpt: Checkpoint, prefix_ids: Sequence[int], suffix_ids: Sequence[int],
    template: str | None = None,
) -> list[int]:
    """Prompt token ids: the template's text encoded, prefix and suffix ids spliced in."""
    text = fim_template(ckpt, template)
    if text.count("{prefix}") != 1 or text.count("{suffix}") != 1:
        raise ValueError("a FIM template holds {prefix} and {suffix} exactly once each")
    ids: list[int] = []
    rest = text
    while rest:
        cut = min((i for i in (rest.find("{prefix}"), rest.find("{suffix}")) if i >= 0),
                  default=len(rest))
        ids += ckpt.tokenizer.encode(rest[:cut]) if cut else []
        if cut == len(rest):
            break
        slot = rest[cut:cut + 8]
        ids += list(prefix_ids if slot == "{prefix}" else suffix_ids)
        rest = rest[cut + 8:]
    return ids


# ---------------------------------------------------------------------------------------------
# Sampler settings


@dataclass
class BlockSettings:
    max_steps: int
    entropy_bound: float
    t_min: float
    t_max: float
    stability: int  # steps the argmax canvas must stay unchanged to stop early
    confidence: float  # ... while the mean entropy is below this
    eos_ids: list[int]
    pad_id: int | None
    eos_penalty: float
    seed: int


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def block_settings(ckpt: Checkpoint, settings: SamplerSettings) -> BlockSettings:
    """The checkpoint's generation config, overridden where `settings` says so.

    The family has one sampler (entropy bound) and one temperature schedule (linear from t_max
    to t_min). `settings.gamma` replaces the bound when `settings.sampler == "entropy"`,
    `settings.max_steps` the step limit; `settings.temperature` and `threshold`/`k` do not
    apply.
    """
    gen = ckpt.generation_config or {}
    text_config = ckpt.raw_config.get("text_config") or {}
    sampler_config = gen.get("sampler_config") or {}
    bound = float(sampler_config.get("entropy_bound", DEFAULT_ENTROPY_BOUND))
    if settings.sampler == "entropy":
        bound = settings.gamma
    eos = gen.get("eos_token_id", text_config.get("eos_token_id", ckpt.config.eos_token_id))
    pad = gen.get("pad_token_id", text_config.get("pad_token_id", ckpt.config.pad_token_id))
    return BlockSettings(
        max_steps=settings.max_steps or int(gen.get("max_denoising_steps") or DEFAULT_MAX_STEPS),
        entropy_bound=bound,
        t_min=float(gen.get("t_min", DEFAULT_T_MIN)),
        t_max=float(gen.get("t_max", DEFAULT_T_MAX)),
        stability=int(gen.get("stability_threshold", DEFAULT_STABILITY)),
        confidence=float(gen.get("confidence_threshold", DEFAULT_CONFIDENCE)),
        eos_ids=_ids(eos),
        pad_id=None if pad is None else int(pad),
        eos_penalty=settings.eos_penalty,
        seed=settings.seed,
    )


def temperature(remaining: int, s: BlockSettings, device: torch.device | str = "cpu") -> Tensor:
    """Linear schedule; `remaining` counts down from max_steps (first step) to 1 (last).

    Computed in float32 on a tensor step, as the reference does, so the scaled logits agree
    to the last bit.
    """
    step = torch.tensor(remaining, dtype=torch.int32, device=device)
    return s.t_min + (s.t_max - s.t_min) * (step / s.max_steps)


def entropy_bound_accept(entropy: Tensor, bound: float) -> Tensor:
    """EB-sampler (arXiv 2505.24857): accept the k lowest-entropy positions while
    sum(entropy) - max(entropy) <= bound. Bool mask shaped like `entropy` [B, L].

    Written as the reference writes it (unstable sort included), so ties break the same way.
    """
    sorted_h, order = torch.sort(entropy, dim=-1, descending=False)
    # Ascending order: the largest accepted entropy is the current one.
    within = torch.cumsum(sorted_h, dim=-1) - sorted_h <= bound
    return torch.scatter(torch.zeros_like(within), dim=-1, index=order, src=within)


# ---------------------------------------------------------------------------------------------
# The denoising loop


def block_stop_ids(s: BlockSettings) -> set[int]:
    """The tokens that end a completion: the generation config's EOS and pad."""
    return set(s.eos_ids) | ({s.pad_id} if s.pad_id is not None else set())


def _eos_to_pad(ids: list[int], s: BlockSettings) -> tuple[list[int], bool]:
    """Tokens after the first EOS become pad (the EOS stays); True when there was an EOS."""
    first = next((i for i, t in enumerate(ids) if t in s.eos_ids), None)
    if first is None:
        return ids, False
    if s.pad_id is None:
        return ids, True
    return ids[:first + 1] + [s.pad_id] * (len(ids) - first - 1), True


def denoise_block(
    model: Any,
    ckpt: Checkpoint,
    prefix_ids: Sequence[int],
    suffix_ids: Sequence[int],
    max_tokens: int,
    settings: SamplerSettings,
    start_ids: Sequence[int] | None = None,
    pinned: Sequence[bool] | None = None,
    template: str | None = None,
    allowed: frozenset[int] | None = None,
) -> Iterator[Draft]:
    """Fill the hole between prefix and suffix; one Draft per denoising step, then a final one.

    A draft's `token_ids` are the hole so far: finished canvases, then the current canvas's
    argmax (what it would commit now). `committed` counts finished tokens plus the positions
    the sampler accepted this step. The final Draft (done=True) holds what `generate` returns
    after the prompt, cut to `max_tokens`: tokens after the first EOS are pad, and
    `committed / step` is generate's `tokens_per_forward` (non-pad tokens per decoder pass).

    `start_ids` starts the canvas from existing text (rewrite); canvases are
    `config.canvas_length` long and positions past `start_ids` start as noise. With `pinned`
    (one flag per start token) only pinned positions keep their start token, now and at every
    step; the others start as noise and are denoised (edit strength = share not pinned).
    The runner (engine.decode.runner) takes one draft per step and stops taking them when the
    request is cancelled. `allowed` (engine.text.canvas.Canvas.allowed): the only token ids the
    sampler may pick, besides the stop and pad tokens.
    """
    s = block_settings(ckpt, settings)
    prompt = fim_prompt_ids(ckpt, prefix_ids, suffix_ids, template)
    if not prompt:
        raise ValueError("the prompt is empty")
    if pinned is not None and (start_ids is None or len(pinned) != len(start_ids)):
        raise ValueError("pinned needs start_ids and one flag per start token")

    stop = block_stop_ids(s)
    run = _start_run(model, s, None if allowed is None else allowed | stop, pinned is not None)
    length, device = run.canvas_len, run.device
    start = list(start_ids or [])
    flags = list(pinned) if pinned is not None else None
    to_encode = torch.tensor([prompt], dtype=torch.long, device=device)
    seq_len = len(prompt)  # tokens in the cache once `to_encode` is in
    done_ids: list[int] = []
    forwards = 0

    def draft(ids: list[int], committed: int, done: bool = False, reason: str = "") -> Draft:
        ids = ids[:max_tokens]
        return Draft(step=forwards, token_ids=ids, committed=min(committed, len(ids)),
                     text=ckpt.tokenizer.decode(completion_ids(ids, stop)), done=done,
                     finish_reason=reason)

    with torch.inference_mode():
        for c in range(math.ceil(max_tokens / length)):
            _encode(run, to_encode, seq_len)
            canvas = _start_canvas(run, start[c * length:(c + 1) * length],
                                   None if flags is None else flags[c * length:(c + 1) * length])
            pinned_count = int((~canvas.free).sum())
            for accepted in _canvas_steps(run, canvas, seq_len):
                forwards += 1
                committed = len(done_ids) + int((accepted & canvas.free).sum()) + pinned_count
                yield draft(done_ids + canvas.argmax[0].tolist(), committed)
            ids, ended = _eos_to_pad(canvas.argmax[0].tolist(), s)
            done_ids += ids
            if ended:
                break
            to_encode = torch.tensor([ids], dtype=torch.long, device=device)
            seq_len += length

    final = done_ids[:max_tokens]
    non_pad = sum(1 for t in final if t != s.pad_id)
    yield draft(final, non_pad, True, "stop" if any(t in stop for t in final) else "length")


@dataclass
class _Run:
    """What every step of one request reads."""

    model: Any
    s: BlockSettings
    cache: Any  # transformers' DynamicCache
    generator: torch.Generator
    forbidden: Tensor | None  # [V] bool: tokens outside `allowed`; None: all are allowed
    vocab: int
    canvas_len: int
    pinning: bool  # whether some positions are pinned to their start token
    device: torch.device
    embed_dtype: torch.dtype  # what the decoder reads the last step's logits in


@dataclass
class _Canvas:
    """One canvas being denoised: its tokens, the positions pinned to their start token, and
    what the next step reads of the last one."""

    tokens: Tensor  # [1, L]
    start: Tensor  # [1, L]: the pinned positions keep these tokens at every step
    free: Tensor  # [1, L] bool: the positions not pinned
    argmax: Tensor  # [1, L]: what it would commit now
    self_cond: Tensor | None = None  # the previous step's logits
    history: list[Tensor] = field(default_factory=list)  # the last `stability` argmaxes


def _start_run(model: Any, s: BlockSettings, allowed: frozenset[int] | None, pinning: bool
               ) -> _Run:
    """The constants of one request: `allowed`, the only tokens it may write (None: any)."""
    device = next(model.parameters()).device
    vocab = int(model.config.text_config.vocab_size)
    allowed_ids = allowed_mask(allowed, vocab, device)
    return _Run(
        model=model, s=s,
        # The encoder's cache holds the prompt, then each finished canvas in turn.
        cache=_transformers().DynamicCache(config=model.config.get_text_config(decoder=True)),
        generator=torch.Generator(device=device).manual_seed(s.seed),
        forbidden=None if allowed_ids is None else ~allowed_ids,
        vocab=vocab, canvas_len=int(model.config.canvas_length), pinning=pinning,
        device=device, embed_dtype=model.model.decoder.embed_tokens.weight.dtype,
    )


def _encode(run: _Run, ids: Tensor, seq_len: int) -> None:
    """Encode what the cache lacks (the prompt first, then the canvas just finished): `ids`
    [1, n], the last n of the `seq_len` tokens the cache holds once they are in."""
    model, device = run.model, run.device
    positions = torch.arange(seq_len - ids.shape[1], seq_len, dtype=torch.int32,
                             device=device)[None]
    seen = torch.ones((1, seq_len), dtype=torch.bool, device=device)
    masks = model.model.encoder.create_masks_for_generate(
        config=model.config, inputs_embeds=torch.empty((1, ids.shape[1], 0),
                                                       dtype=model.dtype, device=device),
        attention_mask=seen, past_key_values=run.cache, position_ids=positions)
    model.model.encoder(input_ids=ids, attention_mask=masks, past_key_values=run.cache,
                        position_ids=positions)


def _start_canvas(run: _Run, piece: list[int], flags: list[bool] | None) -> _Canvas:
    """A canvas of noise, its first positions `piece` (a rewrite's start tokens): all of
    them, or, with `flags`, the pinned ones."""
    device = run.device
    # generate() draws the noise canvas even when a start canvas is given: keep the
    # random stream in step with it.
    canvas = torch.randint(0, run.vocab, (1, run.canvas_len), generator=run.generator,
                           device=device)
    keep = torch.zeros((1, run.canvas_len), dtype=torch.bool, device=device)
    if piece:
        piece_t = torch.tensor(piece, dtype=torch.long, device=device)
        if flags is None:
            canvas[0, :len(piece)] = piece_t
        else:
            keep[0, :len(piece)] = torch.tensor(flags[:len(piece)], device=device)
            canvas[0, :len(piece)] = torch.where(keep[0, :len(piece)], piece_t,
                                                 canvas[0, :len(piece)])
    return _Canvas(tokens=canvas, start=canvas.clone(), free=~keep, argmax=canvas)


def _canvas_steps(run: _Run, canvas: _Canvas, seq_len: int) -> Iterator[Tensor]:
    """Denoise `canvas` after the `seq_len` tokens the cache holds, a step at a time; after
    each, the positions it accepted. Ends after max_steps, or once the argmax canvas has
    stayed the same for `stability` steps with a low mean entropy (an adaptive stop)."""
    model, device, length = run.model, run.device, run.canvas_len
    positions = torch.arange(seq_len, seq_len + length, dtype=torch.int32, device=device)[None]
    masks = model.model.decoder.create_diffusion_decoder_attention_mask(
        config=model.config, inputs_embeds=canvas.tokens[..., None], past_key_values=run.cache,
        decoder_attention_mask=torch.ones((1, seq_len + length), dtype=torch.bool,
                                          device=device))
    for remaining in range(run.s.max_steps, 0, -1):
        logits = model(decoder_input_ids=canvas.tokens, self_conditioning_logits=canvas.self_cond,
                       decoder_attention_mask=masks, past_key_values=run.cache,
                       decoder_position_ids=positions).logits
        accepted, done = _step(run, canvas, logits, remaining)
        yield accepted
        if done:
            return


def _step(run: _Run, canvas: _Canvas, logits: Tensor, remaining: int) -> tuple[Tensor, bool]:
    """One step of `canvas` from the decoder's `logits`: propose a token everywhere, accept
    the confident ones, renoise the rest. The positions accepted, and whether the argmax
    canvas is stable and confident (the canvas is done)."""
    s, free, device = run.s, canvas.free, run.device
    if s.eos_penalty and s.eos_ids:
        logits[..., s.eos_ids] -= s.eos_penalty
    logits = logits / temperature(remaining, s, device)
    # The next step conditions on what the model said, not on the restriction.
    raw_logits = logits
    if run.forbidden is not None:
        logits = logits.masked_fill(run.forbidden, float("-inf"))

    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    proposal = torch.multinomial(probs.view(-1, run.vocab), 1, generator=run.generator)
    proposal = proposal.view(1, run.canvas_len)
    new_argmax = logits.argmax(dim=-1)
    entropy = torch.distributions.Categorical(logits=logits).entropy()
    if run.pinning:
        # Pinned tokens are fixed: they cost none of the entropy budget.
        entropy = torch.where(free, entropy, torch.zeros_like(entropy))
    accepted = entropy_bound_accept(entropy, s.entropy_bound)
    tokens = torch.where(accepted, proposal, canvas.tokens)
    noise = torch.randint(0, run.vocab, (1, run.canvas_len), generator=run.generator,
                          device=device)
    tokens = torch.where(accepted, tokens, noise)
    canvas.tokens = torch.where(free, tokens, canvas.start)
    new_argmax = torch.where(free, new_argmax, canvas.start)

    # Adaptive stop: argmax unchanged for `stability` steps and confident overall.
    stable = len(canvas.history) == s.stability and all(
        torch.equal(h, new_argmax) for h in canvas.history)
    canvas.history = (canvas.history + [new_argmax])[-s.stability:] if s.stability else []
    if run.pinning:
        mean_entropy = entropy.sum(dim=-1) / free.sum(dim=-1).clamp_min(1)
    else:
        mean_entropy = entropy.mean(dim=-1)
    confident = bool(mean_entropy < s.confidence)
    canvas.argmax = new_argmax
    canvas.self_cond = raw_logits.to(run.embed_dtype)
    return accepted, stable and confident
