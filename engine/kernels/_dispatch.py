"""When the triton kernels run: shared by every kernel's dispatcher."""

from __future__ import annotations

import importlib.util
import os
from functools import cache

from torch import Tensor


def env_on(name: str, default: str) -> bool:
    return os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on", "y")


def interpreting() -> bool:
    """Whether TRITON_INTERPRET asks for triton's CPU interpreter."""
    return env_on("TRITON_INTERPRET", "0")


@cache
def triton_available() -> bool:
    """Whether triton is installed (checked without importing it)."""
    return importlib.util.find_spec("triton") is not None


def wanted(x: Tensor) -> bool:
    """Whether a kernel should run on `x`: triton installed, not turned off with
    DG_LSP_KERNELS=0, and `x` on a CUDA GPU or triton interpreting."""
    if not env_on("DG_LSP_KERNELS", "1") or not triton_available():
        return False
    return x.is_cuda or interpreting()
