"""The decoder-only transformer behind the masked and autoregressive families.

Grouped-query attention, rotary positions, RMSNorm and a SwiGLU MLP, with module names that
mirror Qwen2's so a Dream-family `state_dict` loads as it is (LLaDA's names are mapped by the
loader). The same module is bidirectional (masked diffusion) or causal (the AR baseline),
chosen by `ModelConfig.causal`.

Context caching: `forward` can return the keys/values it computed and accept keys/values of
other positions (`past`), so a denoising loop computes prefix and suffix once and then runs
only the hole. Positions are explicit because the cached and the live tokens are not
contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.kernels.norms import rms_norm
from engine.models.config import ModelConfig
from engine.models.int4 import Int4Linear


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # Normalize in float32 as the reference implementations do, then cast back; one
        # triton kernel at inference on a GPU (engine.kernels.norms), else torch ops.
        return rms_norm(x, self.weight, self.eps)


def rope_tables(cfg: ModelConfig, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos/sin of shape [B, S, head_dim] for integer positions [B, S]."""
    half = torch.arange(0, cfg.head_dim, 2, device=positions.device, dtype=torch.float32)
    inv_freq = 1.0 / (cfg.rope_theta ** (half / cfg.head_dim))
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: [B, H, S, D]; cos/sin: [B, S, D]."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


@dataclass
class LayerKV:
    k: Tensor  # [B, kv_heads, S, head_dim], after rotary
    v: Tensor


def fused_linear(*linears: nn.Module) -> nn.Module:
    """One linear layer computing `linears` side by side (outputs concatenated): float or
    int4 layers (those loaded quantized; packed once fused)."""
    if isinstance(linears[0], Int4Linear):
        return Int4Linear.concatenated(*linears).pack()
    first = linears[0]
    # Built on the meta device and given the concatenated tensors: a layer allocated for real
    # would initialize (touch) a third copy of the weights, a 7B layer's MLP is 0.5 GB.
    with torch.device("meta"):
        fused = nn.Linear(first.in_features, sum(lin.out_features for lin in linears),
                          bias=first.bias is not None)
    grad = first.weight.requires_grad
    fused.weight = nn.Parameter(torch.cat([lin.weight.detach() for lin in linears]), grad)
    if first.bias is not None:
        fused.bias = nn.Parameter(torch.cat([lin.bias.detach() for lin in linears]), grad)
    return fused


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, h, kvh, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(d, h * hd, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(d, kvh * hd, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(d, kvh * hd, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(h * hd, d, bias=False)
        self.qkv_proj: nn.Linear | None = None  # set by fuse()
        self.sizes = [h * hd, kvh * hd, kvh * hd]

    def fuse(self) -> None:
        """q, k and v in one matmul (see Transformer.fuse_projections)."""
        self.qkv_proj = fused_linear(self.q_proj, self.k_proj, self.v_proj)
        del self.q_proj, self.k_proj, self.v_proj

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.qkv_proj is None:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q, k, v = self.qkv_proj(x).split(self.sizes, dim=-1)
        return q, k, v

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, past: LayerKV | None,
        is_causal: bool = False,
    ) -> tuple[Tensor, LayerKV]:
        b, s, _ = x.shape
        cfg = self.cfg
        q, k, v = self.project(x)
        q = q.view(b, s, cfg.num_heads, cfg.head_dim).transpose(1, 2)
        k = k.view(b, s, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        v = v.view(b, s, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        new = LayerKV(k, v)
        if past is not None:
            k, v = torch.cat([past.k, k], dim=2), torch.cat([past.v, v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                             enable_gqa=cfg.num_kv_heads != cfg.num_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1)), new


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.gate_up_proj: nn.Linear | None = None  # set by fuse()

    def fuse(self) -> None:
        """gate and up in one matmul (see Transformer.fuse_projections)."""
        self.gate_up_proj = fused_linear(self.gate_proj, self.up_proj)
        del self.gate_proj, self.up_proj

    def forward(self, x: Tensor) -> Tensor:
        if self.gate_up_proj is None:
            gate, up = self.gate_proj(x), self.up_proj(x)
        else:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, past: LayerKV | None,
        is_causal: bool = False,
    ) -> tuple[Tensor, LayerKV]:
        h, kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, past, is_causal)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        # Built on the meta device to be loaded, the embedding skips its random init: on meta
        # that init imports torch._dynamo, which every start of the CLI and the server paid.
        meta = torch.empty(0).is_meta
        weight = torch.empty(cfg.vocab_size, cfg.hidden_size) if meta else None
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, _weight=weight)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def attention_mask(
    cfg: ModelConfig,
    q_pos: Tensor,
    k_pos: Tensor,
    k_valid: Tensor | None,
) -> Tensor | None:
    """Boolean [B, 1, Sq, Sk] mask (True = may attend), or None when everything may attend."""
    allowed = None
    if cfg.causal:
        allowed = k_pos[:, None, :] <= q_pos[:, :, None]
    if k_valid is not None:
        valid = k_valid[:, None, :].expand(-1, q_pos.shape[1], -1)
        allowed = valid if allowed is None else allowed & valid
    return None if allowed is None else allowed[:, None]


class Transformer(nn.Module):
    """`model.*` + `lm_head` exactly as Qwen2/Dream checkpoints name them."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def fuse_projections(self) -> Transformer:
        """For inference: q/k/v in one matmul and gate/up in another, as gpt-fast does.

        A small model's cached pass is mostly per-call overhead, and an int8 layer also
        quantizes its input on every call; fused, a layer makes 4 linear calls instead of 7
        (the gain is in docs/performance.md).
        The outputs are the same; the state_dict no longer has the checkpoint's names, so a
        model to train or save stays unfused.
        """
        for layer in self.model.layers:
            layer.self_attn.fuse()
            layer.mlp.fuse()
        return self

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor | None = None,
        past: list[LayerKV] | None = None,
        past_positions: Tensor | None = None,
        key_valid: Tensor | None = None,
        logit_rows: tuple[int, int] | None = None,
    ) -> tuple[Tensor, list[LayerKV]]:
        """Raw logits [B, S, V] for `input_ids` (no shift applied) and their keys/values.

        `past` holds keys/values of other positions (`past_positions`) that every token may
        attend to, subject to causality. `key_valid` [B, S_past + S] marks real (non-padding)
        keys when a batch mixes lengths. `logit_rows` (a, b) computes logits for input rows
        a..b-1 only: the vocabulary projection of a whole canvas is a large share of the pass
        when only the hole's rows are read (docs/performance.md).
        """
        b, s = input_ids.shape
        if positions is None:
            positions = torch.arange(s, device=input_ids.device).expand(b, s)
        x = self.model.embed_tokens(input_ids)
        cos, sin = rope_tables(self.cfg, positions, x.dtype)
        # A plain causal pass (training, AR prefill) takes SDPA's fused causal path.
        plain_causal = self.cfg.causal and past is None and key_valid is None
        mask = None
        if not plain_causal:
            k_pos = positions if past is None else torch.cat([past_positions, positions], 1)
            mask = attention_mask(self.cfg, positions, k_pos, key_valid)
        new_kv = []
        for i, layer in enumerate(self.model.layers):
            x, kv = layer(x, cos, sin, mask, None if past is None else past[i], plain_causal)
            new_kv.append(kv)
        if logit_rows is not None:
            x = x[:, logit_rows[0] : logit_rows[1]]
        return self.lm_head(self.model.norm(x)), new_kv


def shift_logits(logits: Tensor) -> Tensor:
    """Dream's convention: the logit at p-1 fills p (position 0 keeps its own)."""
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
