"""Triton kernels (sampling statistics, RMSNorm) against their torch fallbacks (engine.kernels).

The kernels run where this process can run them: on CPU tensors when TRITON_INTERPRET=1
(triton's interpreter), else on a CUDA GPU. triton fixes interpreter-or-compiler for the whole
process when it is first imported, so on a CPU machine tests/integration/test_kernels.py runs
this file again in a child process with TRITON_INTERPRET=1 and the kernel tests here skip.
Without triton installed, only the fallback and dispatch tests run.
"""

from __future__ import annotations

import pytest
import torch

from engine.decode.samplers import step
from engine.kernels import norms, sampling
from engine.kernels._dispatch import interpreting, triton_available
from engine.kernels.norms import torch_rms_norm, triton_rms_norm
from engine.kernels.sampling import fused_stats, torch_stats, triton_stats
from engine.models.transformer import RMSNorm
from engine.types import SamplerSettings

if not triton_available():
    DEVICE = None
elif interpreting():
    DEVICE = "cpu"
elif torch.cuda.is_available():
    DEVICE = "cuda"
else:
    DEVICE = None

needs_kernels = pytest.mark.skipif(
    DEVICE is None,
    reason="triton missing, or no GPU: runs in tests/integration/test_kernels.py's child",
)


def random_logits(n: int, V: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, V, generator=g) * scale
    # A few sharp rows, so confidences fall on both sides of the threshold.
    x[::3, (torch.arange(0, n, 3) * 7) % V] += 12.0
    return x


def assert_same_stats(x: torch.Tensor, temperature: float, **kw: int) -> None:
    got = triton_stats(x.to(DEVICE), temperature, **kw)
    want = torch_stats(x, temperature)
    assert got[0].cpu().tolist() == want[0].tolist()
    torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-5, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(got[2].cpu(), want[2], rtol=1e-5, atol=2e-6, equal_nan=True)


@needs_kernels
@pytest.mark.parametrize(
    ("n", "V", "dtype", "temperature", "splits", "block"),
    [
        (1, 1000, torch.float32, 0.0, 1, 256),  # one row
        (4, 3001, torch.float32, 0.0, 1, 1024),  # V not a multiple of the tile
        (3, 2500, torch.float16, 0.0, 2, 1024),  # half precision, a row split in two chunks
        (3, 2500, torch.bfloat16, 0.7, 3, 512),  # bfloat16, temperature, three chunks
        (2, 5000, torch.float32, 1.5, 1, 2048),
    ],
)
def test_stats_match_torch_on_random_logits(
    n: int, V: int, dtype: torch.dtype, temperature: float, splits: int, block: int
) -> None:
    x = random_logits(n, V, seed=V + n).to(dtype)
    x[0, 10:400] = float("-inf")  # banned tokens
    assert_same_stats(x, temperature, splits=splits, block=block)


@needs_kernels
def test_non_contiguous_logits_are_read_correctly() -> None:
    x = random_logits(700, 3, seed=1).t()  # [3, 700], stride (1, 3)
    assert_same_stats(x, 0.0, block=256)


@needs_kernels
@pytest.mark.parametrize("splits", [1, 3])
def test_ties_go_to_the_lowest_index_across_tiles_and_chunks(splits: int) -> None:
    x = torch.zeros(3, 1500)
    x[0, [1400, 130, 900]] = 5.0  # the same max in three tiles (and chunks)
    x[1, [7, 8]] = 2.0  # within one tile
    # Row 2 is flat: token 0, confidence 1/V, entropy log V.
    tokens, confidence, entropy = triton_stats(x.to(DEVICE), 0.0, splits=splits, block=256)
    assert tokens.tolist() == [130, 7, 0] == torch_stats(x)[0].tolist()
    assert confidence[2].item() == pytest.approx(1 / 1500, rel=1e-6)
    assert entropy[2].item() == pytest.approx(torch.log(torch.tensor(1500.0)).item(), rel=1e-6)


@needs_kernels
def test_rows_with_one_or_no_allowed_token() -> None:
    x = torch.full((3, 1200), float("-inf"))
    x[0, 1111] = -3.0  # one allowed token, in the last tile
    x[1, 5] = 40.0
    # Row 2 is all -inf: token 0 and NaN, as torch's softmax gives.
    for splits in (1, 2):
        tokens, confidence, entropy = triton_stats(x.to(DEVICE), 0.0, splits=splits, block=512)
        assert tokens.tolist() == [1111, 5, 0]
        assert confidence[:2].tolist() == [1.0, 1.0] and entropy[:2].tolist() == [0.0, 0.0]
        assert confidence[2].isnan() and entropy[2].isnan()
    assert_same_stats(x, 0.0, block=512)


@needs_kernels
def test_near_certain_rows_get_their_tiny_entropy_as_accurately_as_torch() -> None:
    # Softcapped-model-like logits: one token at +30 (or +8), the rest spread low; entropies
    # of 1e-18..1e-4. Both float32 computations are near the float64 truth: the top token's
    # probability is within a couple of float32 ulps of 1 (6e-8 below 1) and -p*log(p)
    # inherits that absolute error, so 4 ulps of 1 (4.8e-7) are allowed (2.1e-7 seen with
    # AVX2 kernels, under 1e-7 with AVX-512).
    x = random_logits(4, 4000, seed=3, scale=2.0) - 15.0
    x[:, 2222] = 30.0
    x[1, 2222] = 8.0
    tokens, _, entropy = triton_stats(x.to(DEVICE), 0.0, block=2048)
    p = torch.softmax(x.double(), dim=-1)
    truth = -(p * p.clamp_min(1e-300).log()).sum(-1)
    assert tokens.tolist() == [2222] * 4
    ulps_of_one = 4 * torch.finfo(torch.float32).eps
    torch.testing.assert_close(entropy.cpu().double(), truth, rtol=1e-5, atol=ulps_of_one)
    torch.testing.assert_close(torch_stats(x)[2].double(), truth, rtol=1e-5, atol=ulps_of_one)


@needs_kernels
@pytest.mark.parametrize("sampler", ["topk", "threshold", "entropy"])
def test_step_commits_the_same_with_the_kernel_and_the_fallback(
    sampler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    logits = random_logits(16, 1500, seed=11).to(DEVICE)
    logits[:, 100:140] = float("-inf")
    masked = torch.ones(16, dtype=torch.bool, device=DEVICE)
    masked[[2, 5, 9]] = False
    settings = SamplerSettings(sampler=sampler, k=4, threshold=0.9, gamma=0.5)
    assert sampling.use_triton(logits)
    fused = step(logits, masked, settings, min_commit=2)
    assert not sampling._failed
    monkeypatch.setenv("DG_LSP_KERNELS", "0")
    assert not sampling.use_triton(logits)
    fallback = step(logits, masked, settings, min_commit=2)
    assert fused[0].tolist() == fallback[0].tolist()
    assert fused[1].tolist() == fallback[1].tolist()
    assert 2 <= int(fused[0].sum()) < 13  # a real choice was made


@needs_kernels
@pytest.mark.parametrize(
    ("shape", "x_dtype", "w_dtype"),
    [
        ((3, 100), torch.float32, torch.float32),  # D not a power of two
        ((2, 5, 96), torch.bfloat16, torch.bfloat16),
        ((4, 64), torch.float16, torch.float32),  # promoted: a float32 output
    ],
)
def test_rms_norm_matches_torch(
    shape: tuple[int, ...], x_dtype: torch.dtype, w_dtype: torch.dtype
) -> None:
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3 + 0.5).to(x_dtype)
    w = (torch.rand(shape[-1], generator=g) + 0.5).to(w_dtype)
    got = triton_rms_norm(x.to(DEVICE), w.to(DEVICE), 1e-6).cpu()
    want = torch_rms_norm(x, w, 1e-6)
    assert got.dtype == want.dtype and got.shape == want.shape
    # The sum's order may move the float32 scale by an ulp; rounded to a 16-bit type that ulp
    # almost never shows, and at most as the type's last bit.
    if x_dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    else:
        torch.testing.assert_close(got.float(), want.float(), rtol=8e-3, atol=1e-5)
        assert (got == want).float().mean() > 0.97


@needs_kernels
def test_rms_norm_module_uses_the_kernel_only_without_gradients() -> None:
    norm = RMSNorm(80, 1e-5).to(DEVICE)
    x = torch.randn(2, 7, 80, device=DEVICE)
    assert not norms.use_triton(x)  # gradients on: the kernel has no backward
    trained = norm(x)
    with torch.inference_mode():
        assert norms.use_triton(x)
        served = norm(x)
    assert not norms._failed
    torch.testing.assert_close(served, trained.detach())


def test_dispatch_uses_torch_on_cpu_unless_interpreting(monkeypatch: pytest.MonkeyPatch) -> None:
    x = random_logits(5, 300, seed=2)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not sampling.use_triton(x)
    for got, want in zip(fused_stats(x), torch_stats(x), strict=True):
        assert torch.equal(got, want)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("DG_LSP_KERNELS", "0")
    assert not sampling.use_triton(x)
    with torch.inference_mode():
        assert not norms.use_triton(x)


def test_greedy_fallback_is_the_samplers_reference_computation() -> None:
    x = random_logits(6, 500, seed=4).half()
    tokens, confidence, entropy = torch_stats(x, 0.0)
    probs = torch.softmax(x.float(), dim=-1)
    assert tokens.tolist() == probs.argmax(-1).tolist()
    torch.testing.assert_close(confidence, probs.max(-1).values)
    torch.testing.assert_close(entropy, torch.distributions.Categorical(probs=probs).entropy())


def test_bench_times_the_fallback_on_a_tiny_shape() -> None:
    from engine.kernels.bench import bench

    (row,) = bench(shapes=((2, 64),), device="cpu", repeat=1)
    assert row["n"] == 2 and row["torch_ms"] > 0
