"""Compile the triton kernels (sampling, RMSNorm) for a CUDA GPU without having one.

    python scripts/kernels_compile_check.py [--arch 90]

The interpreter tests (tests/unit/test_kernels.py) check what the kernels compute; this checks that
triton's real compiler accepts them (front end, MLIR passes, PTX, ptxas to a cubin) for every
dtype and variant the dispatcher launches. It needs triton (`pip install "dg-lsp[gpu]"`), no
GPU, and about a minute of CPU.
"""

from __future__ import annotations

import argparse
import os

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    raise SystemExit("unset TRITON_INTERPRET: this checks the compiler, not the interpreter")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from engine.kernels import _triton_norms as kn  # noqa: E402
from engine.kernels import _triton_sampling as k  # noqa: E402
from engine.kernels.sampling import BLOCK  # noqa: E402

PARTIALS = {
    "stride_row": "i32", "V": "i32", "chunk": "i32", "inv_t": "fp32",
    "token_ptr": "*i64", "conf_ptr": "*fp32", "ent_ptr": "*fp32",
    "best_ptr": "*fp32", "idx_ptr": "*i32", "m_ptr": "*fp32", "z_ptr": "*fp32", "s_ptr": "*fp32",
    "SCALE": "constexpr", "SPLIT": "constexpr", "BLOCK": "constexpr",
}
COMBINE = {
    "best_ptr": "*fp32", "idx_ptr": "*i32", "m_ptr": "*fp32", "z_ptr": "*fp32", "s_ptr": "*fp32",
    "splits": "i32", "token_ptr": "*i64", "conf_ptr": "*fp32", "ent_ptr": "*fp32",
    "BLOCK_S": "constexpr",
}


def compile_kernel(fn: object, signature: dict[str, str], constants: dict[str, object],
                   target: GPUTarget, warps: int) -> int:
    names = fn.arg_names  # type: ignore[attr-defined]
    consts = {(names.index(name),): value for name, value in constants.items()}
    compiled = triton.compile(ASTSource(fn, signature, consts), target=target,
                              options={"num_warps": warps})
    return len(compiled.asm["cubin"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 80, 90")
    target = GPUTarget("cuda", p.parse_args().arch, 32)
    print(f"triton {triton.__version__}, target sm_{target.arch}")
    for dtype in ("fp32", "fp16", "bf16"):
        for split in (False, True):
            for scale in (False, True):
                sig = {"logits_ptr": f"*{dtype}", **PARTIALS}
                size = compile_kernel(k._partials_kernel, sig,
                                      {"SCALE": scale, "SPLIT": split, "BLOCK": BLOCK}, target, 8)
                print(f"  partials {dtype} split={split} scale={scale}: cubin {size} bytes")
    size = compile_kernel(k._combine_kernel, COMBINE, {"BLOCK_S": 16}, target, 1)
    print(f"  combine: cubin {size} bytes")
    for x_dtype, w_dtype in (("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp32")):
        out = "fp32" if "fp32" in (x_dtype, w_dtype) else x_dtype
        sig = {"x_ptr": f"*{x_dtype}", "w_ptr": f"*{w_dtype}", "out_ptr": f"*{out}",
               "stride_x": "i32", "stride_out": "i32", "D": "i32", "eps": "fp32",
               "BLOCK_D": "constexpr"}
        size = compile_kernel(kn._rms_norm_kernel, sig, {"BLOCK_D": 4096}, target, 8)
        print(f"  rms_norm x={x_dtype} w={w_dtype}: cubin {size} bytes")


if __name__ == "__main__":
    main()
