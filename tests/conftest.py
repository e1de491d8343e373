"""Fixtures every module may use: tiny random checkpoints in each layout the engine loads,
the bundled model in process, the model the real-editor tests serve."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Servers and CLIs the tests start inherit this: tiny models gain nothing from intra-op
# threads, and on a busy 2-core machine their spin-waits make forward passes erratic.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# torch.compile's kernel cache is shared by every process of the user, and its key leaves out
# the CPU capability a run holds the kernels to (ATEN_CPU_CAPABILITY): kernels cached by CI's
# AVX2 pass made the next run's compiled test segfault. Each test session compiles afresh.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="dg-lsp-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], True)

from tests.support.tiny_checkpoints import (
    write_dream_checkpoint,
    write_llada_checkpoint,
    write_qwen2_ar_checkpoint,
)

BUNDLED = Path(__file__).resolve().parent.parent / "engine" / "bundled" / "default"


@pytest.fixture(scope="session")
def dream_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dream layout (masked family, shifted logits), untied head, GQA 4/2."""
    return write_dream_checkpoint(tmp_path_factory.mktemp("dream"))


@pytest.fixture(scope="session")
def llada_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LLaDA layout (masked family, unshifted logits), untied head, GQA 4/2."""
    return write_llada_checkpoint(tmp_path_factory.mktemp("llada"))


@pytest.fixture(scope="session")
def ar_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen2ForCausalLM layout: the autoregressive baseline."""
    return write_qwen2_ar_checkpoint(tmp_path_factory.mktemp("ar"))


@pytest.fixture(scope="module")
def bundled_engine():
    """The bundled model in this process on the CPU, as `dg-lsp` loads it; skips where the
    checkpoint is absent. Per module: its decoder keeps a prefix cache, so one module's requests
    never warm another's."""
    if not (BUNDLED / "config.json").exists():
        pytest.skip("the bundled model is not present")
    from engine import Engine

    return Engine.load(str(BUNDLED), device="cpu")


@pytest.fixture(scope="module")
def editor_model(request: pytest.FixtureRequest) -> Path:
    """The model a real editor's server loads: the bundled one, else the tiny Dream checkpoint."""
    if (BUNDLED / "config.json").exists():
        return BUNDLED
    return request.getfixturevalue("dream_ckpt")


@pytest.fixture(scope="session", autouse=True)
def _private_engines(tmp_path_factory: pytest.TempPathFactory):
    """Resident engines the tests start live in a private runtime dir and are stopped after."""
    runtime = tmp_path_factory.mktemp("runtime")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    yield runtime
    from engine.serve.socket.client import EngineClient, EngineUnavailable
    from engine.serve.socket.endpoint import Endpoint

    for sock in (runtime / "dg-engine").glob("*.sock"):
        try:
            EngineClient(Endpoint(sock)).shutdown()
        except (EngineUnavailable, OSError):
            pass


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    # The same for this process, whose torch may already be imported.
    import torch

    torch.set_num_threads(1)
