"""dg-engine: loads diffusion code models and denoises holes in code."""

from engine.models.config import CheckpointError, ModelConfig
from engine.types import (
    Draft,
    HolesRequest,
    HolesResult,
    InfillRequest,
    InfillResult,
    RewriteRequest,
    SamplerSettings,
)

__all__ = ["CheckpointError", "Draft", "Engine", "HolesRequest", "HolesResult", "InfillRequest",
           "InfillResult", "ModelConfig", "RewriteRequest", "SamplerSettings"]


def __getattr__(name: str):
    # Imported lazily so `import engine` stays cheap for tools that only need the types.
    if name == "Engine":
        from engine.engine import Engine

        return Engine
    raise AttributeError(name)
