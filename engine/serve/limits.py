"""What one request may ask of an engine: its canvas, its memory and its time. The check that
holds a request to them is engine.serve.admit's, for every door."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

DEFAULT_REQUEST_TIMEOUT = 60.0  # seconds: an interactive completion takes well under one


@dataclass(frozen=True)
class Limits:
    """What one request may ask of this engine."""

    max_canvas: int  # the model's positions
    max_request_bytes: int  # engine.serve.scheduler.request_bytes of one request
    request_timeout: float  # seconds from arrival to the last draft


def free_memory(device: Any) -> int:
    """Bytes free on `device` now: the GPU's, or the machine's available RAM."""
    if device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
