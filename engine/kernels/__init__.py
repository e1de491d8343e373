"""Triton kernels for the hot non-matmul work, each with a torch fallback of the same semantics.

Triton is optional (`pip install "dg-lsp[gpu]"`): nothing here imports it until a kernel is
about to run, and without it every function takes its torch path. See `engine.kernels.sampling`
(the sampler's per-position statistics) and `engine.kernels.norms` (RMSNorm).
"""

from engine.kernels._dispatch import triton_available
from engine.kernels.norms import rms_norm, torch_rms_norm, triton_rms_norm
from engine.kernels.sampling import fused_stats, torch_stats, triton_stats

__all__ = [
    "fused_stats", "rms_norm", "torch_rms_norm", "torch_stats", "triton_available",
    "triton_rms_norm", "triton_stats",
]
