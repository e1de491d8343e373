"""The real-shape bench's peer: llama.cpp's own server (`llama-server`), built once from a
pinned registry package, serving the autoregressive twin written as a GGUF (dg_lsp.measure.
bench_real_shape runs it beside the diffusion side)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

LLAMA_CPP_PYTHON = "0.3.16"  # the sdist vendors llama.cpp at commit 4227c9b


def write_gguf(ar_folder: Path, quant: str) -> Path:
    """The AR twin's weights as a llama.cpp GGUF (architecture qwen2) at `quant`, written once
    beside it: the same tensors, Qwen2.5's tokenizer with its fill-in-the-middle tokens."""
    import gguf
    import numpy as np
    from safetensors import safe_open
    from tokenizers import Tokenizer

    out = ar_folder / f"model-{quant}.gguf"
    if out.exists():
        return out
    cfg = json.loads((ar_folder / "config.json").read_text())
    qtype = getattr(gguf.GGMLQuantizationType, quant)
    partial = out.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), "qwen2")
    writer.add_name(f"random {ar_folder.parent.name} twin")
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_rope_freq_base(cfg["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quant == "Q8_0"
                         else gguf.LlamaFileType.MOSTLY_F16)
    _add_tokenizer(writer, Tokenizer.from_file(str(ar_folder / "tokenizer.json")),
                   cfg["vocab_size"])
    with safe_open(str(ar_folder / "model.safetensors"), framework="pt") as f:
        for name in f.keys():
            data = f.get_tensor(name).float().numpy()
            if data.ndim == 1:
                writer.add_tensor(_gguf_name(name), data.astype(np.float32))
            elif quant == "F16":
                writer.add_tensor(_gguf_name(name), data.astype(np.float16))
            else:
                writer.add_tensor(_gguf_name(name), gguf.quants.quantize(data, qtype),
                                  raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(out)
    return out


def _add_tokenizer(writer: Any, tokenizer: Any, vocab_size: int) -> None:
    import gguf

    specials = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
    by_id = {i: t for t, i in tokenizer.get_vocab(with_added_tokens=True).items()}
    tokens, types = [], []
    for i in range(vocab_size):  # the embedding's rows past the tokenizer are padding
        tokens.append(by_id.get(i, f"[PAD{i}]"))
        types.append(gguf.TokenType.CONTROL if i in specials else
                     gguf.TokenType.NORMAL if i in by_id else gguf.TokenType.UNUSED)
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    eos = tokenizer.token_to_id("<|endoftext|>")
    writer.add_bos_token_id(eos)
    writer.add_eos_token_id(eos)
    writer.add_pad_token_id(eos)
    writer.add_add_bos_token(False)
    for key, text in (("pre", "<|fim_prefix|>"), ("suf", "<|fim_suffix|>"),
                      ("mid", "<|fim_middle|>")):
        writer.add_uint32(f"tokenizer.ggml.fim_{key}_token_id", tokenizer.token_to_id(text))


def _gguf_name(name: str) -> str:
    parts = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
             "output_norm.weight", "lm_head.weight": "output.weight"}
    if name in parts:
        return parts[name]
    _, _, layer, rest = name.split(".", 3)
    rest = (rest.replace("input_layernorm", "attn_norm")
            .replace("post_attention_layernorm", "ffn_norm")
            .replace("self_attn.q_proj", "attn_q").replace("self_attn.k_proj", "attn_k")
            .replace("self_attn.v_proj", "attn_v").replace("self_attn.o_proj", "attn_output")
            .replace("mlp.gate_proj", "ffn_gate").replace("mlp.up_proj", "ffn_up")
            .replace("mlp.down_proj", "ffn_down"))
    return f"blk.{layer}.{rest}"


# -- llama.cpp --------------------------------------------------------------------------------


def llama_source(cache: Path | None = None) -> Path:
    from engine.data.releases import cache_root

    return ((cache or cache_root()) / "llama.cpp" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
            / "vendor" / "llama.cpp")


def build_llama_server(cache: Path | None = None, jobs: int = 2) -> Path:
    """llama.cpp's `llama-server`, CPU only, built once from the pinned llama-cpp-python sdist
    (fetched with pip) into the cache folder. Raises OSError with the reason."""
    source = llama_source(cache)
    binary = source / "build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    folder = source.parents[2]
    folder.mkdir(parents=True, exist_ok=True)
    sdist = folder / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(folder)]
    configure = ["cmake", "-S", str(source), "-B", str(source / "build"),
                 "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DGGML_CUDA=OFF",
                 "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
                 "-DLLAMA_BUILD_COMMIT=4227c9b", "-DLLAMA_BUILD_NUMBER=0"]
    build = ["nice", "-n", "10", "cmake", "--build", str(source / "build"), "--target",
             "llama-server", f"-j{jobs}"]
    try:
        if not sdist.exists():
            _run(download)
        if not (source / "CMakeLists.txt").exists():
            with tarfile.open(sdist) as tar:
                tar.extractall(folder, filter="data")
        _run(configure)
        _run(build)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise OSError(f"llama-server could not be built: {exc}") from exc
    if not binary.exists():
        raise OSError(f"llama-server could not be built: no {binary}")
    return binary


def _run(command: list[str]) -> None:
    if shutil.which(command[0]) is None and not Path(command[0]).exists():
        raise OSError(f"{command[0]} is not installed")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise OSError(f"{' '.join(command[:3])} failed: {' / '.join(tail)}")


def llama_version(binary: Path) -> str:
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    line = next((x for x in (done.stdout + done.stderr).splitlines()
                 if x.startswith("version")), "version: unknown")
    return f"{line.split(':', 1)[1].strip()}, llama-cpp-python {LLAMA_CPP_PYTHON} sdist"


class LlamaServer:
    """`llama-server` on a free local port, serving one GGUF."""

    def __init__(self, binary: Path, model: Path, threads: int) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
             "-t", str(threads), "-tb", str(threads), "-c", "2048", "-np", "1"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                tail = self.log.read().decode(errors="replace").strip().splitlines()[-3:]
                raise OSError(f"llama-server exited: {' / '.join(tail)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health") as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise OSError("llama-server did not become ready in 300 s")

    def infill(self, prefix: str, suffix: str, tokens: int) -> tuple[dict[str, Any], float]:
        """One /infill as llama.vim asks it: the prompt cached across requests, greedy,
        exactly `tokens` tokens. The answer and its seconds."""
        body = json.dumps({"input_prefix": prefix, "input_suffix": suffix, "input_extra": [],
                           "n_predict": tokens, "ignore_eos": True, "cache_prompt": True,
                           "temperature": 0.0, "top_k": 1, "samplers": ["top_k"],
                           "stream": False}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/infill", data=body,
                                         headers={"Content-Type": "application/json"})
        start = time.perf_counter()
        with urllib.request.urlopen(request) as r:
            answer = json.loads(r.read())
        return answer, time.perf_counter() - start

    def peak_rss_mb(self) -> float | None:
        from dg_lsp.measure.bench_lsp import peak_rss_mb

        return peak_rss_mb(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

