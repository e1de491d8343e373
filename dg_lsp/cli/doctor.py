"""`dg-lsp doctor`: what a user (or a bug report) needs when completions do not appear.

It reports versions (dg-lsp, Python, torch, tree-sitter and each grammar), the model and device
a completion would use and why, whether a resident engine is running for them (socket, pid,
model, device, uptime, memory, the last lines of its log) and which languages have grammars.
Each problem is printed with the fix in words; the exit status is 1 when anything is broken.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import dg_lsp
from dg_lsp.settings import add_model_arguments
from dg_lsp.syntax.languages import GRAMMARS_DIR, LANGUAGES

LOG_LINES = 5


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def say(self, label: str, text: str) -> None:
        self.lines.append(f"{label + ':':<13}{text}")

    def broken(self, label: str, text: str, fix: str) -> None:
        self.say(label, f"BROKEN: {text}")
        self.problems.append(f"{label}: {text}\n  fix: {fix}")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("doctor", help="versions, model, device, engine: what is wrong")
    add_model_arguments(parser)
    parser.add_argument("--engine", default=None, metavar="URL",
                        help="check a team's engine at http(s)://HOST:PORT instead of this "
                        "machine's resident engine")
    parser.add_argument("--token-file", default=None,
                        help="the team engine's token (default ~/.config/dg-engine/token)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = Report()
    report.say("dg-lsp", f"{version()} ({Path(dg_lsp.__file__).parent})")
    report.say("python", f"{platform.python_version()} ({sys.executable})")
    check_torch(report)
    check_grammars(report)
    check_model(report, args.model)
    check_device(report, args.device)
    check_memory(report, args.model, args.device, args.dtype)
    if args.engine:
        check_team_engine(report, args.engine, args.token_file)
    else:
        check_engine(report, args.model, args.device, args.dtype)
    if args.json:
        print(json.dumps({"lines": report.lines, "problems": report.problems}, indent=2))
    else:
        print("\n".join(report.lines))
        if report.problems:
            print(f"\n{len(report.problems)} problem(s):")
            print("\n".join(report.problems))
        else:
            print("\nno problems found")
    return 1 if report.problems else 0


def version() -> str:
    """The installed distribution's version (the source tree's when run from a checkout)."""
    try:
        return importlib.metadata.version("dg-lsp")
    except importlib.metadata.PackageNotFoundError:
        return dg_lsp.__version__


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_torch(report: Report) -> None:
    try:
        import torch
    except Exception as exc:  # an ImportError, or a broken binary's OSError
        report.broken("torch", f"cannot be imported ({exc})",
                      "reinstall dg-lsp in a fresh virtual environment (pipx install dg-lsp)")
        return
    cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    wait = os.environ.get("OMP_WAIT_POLICY", "libgomp's default")
    report.say("torch", f"{torch.__version__} ({cuda}, {torch.get_num_threads()} threads, "
               f"OMP_WAIT_POLICY {wait})")


def check_grammars(report: Report) -> None:
    report.say("tree-sitter", _distribution_version("tree-sitter") or "not installed")
    ok = []
    for spec in LANGUAGES:
        wheel = spec.module.replace("_", "-")
        try:
            for query in ("context", "actions"):
                spec.query(query)
        except FileNotFoundError as exc:
            report.broken("grammars", f"{spec.name}: query file missing ({exc.filename})",
                          f"the install lacks {GRAMMARS_DIR}; reinstall dg-lsp")
            continue
        except Exception as exc:  # an ImportError, or tree-sitter refusing a query
            report.broken("grammars", f"{spec.name}: {exc}",
                          f"pip install --force-reinstall {wheel} (in dg-lsp's environment)")
            continue
        ok.append(f"{spec.name} {_distribution_version(wheel) or '?'}")
    report.say("grammars", (", ".join(ok) or "none")
               + " (other languages are completed as plain lines, without code actions)")


def check_model(report: Report, model: str | None) -> None:
    from engine.models.checkpoint import read_checkpoint, resolve, weight_files
    from engine.models.config import CheckpointError

    try:
        folder = resolve(model)
        ckpt = read_checkpoint(folder)
        files = sorted(set(weight_files(folder).values()))
    except (CheckpointError, OSError) as exc:
        report.broken("model", str(exc), "pass --model a checkpoint folder (config.json, "
                      "tokenizer.json, *.safetensors) or a hub id already in the local cache")
        return
    size = sum(f.stat().st_size for f in files)
    why = "the bundled model (no --model / \"model\" setting)" if model in (None, "", "bundled") \
        else "from --model / the \"model\" setting"
    report.say("model", f"{folder} ({ckpt.config.family} family, {ckpt.config.layout} layout, "
               f"{size / 2**20:.0f} MiB of weights; {why})")


def check_device(report: Report, device: str) -> None:
    from engine.serve.socket.endpoint import resolved_device

    resolved = resolved_device(device)
    try:
        import torch
    except Exception:
        report.say("device", f"{device} -> {resolved}")
        return
    if device == "auto":
        why = (f"CUDA is available ({torch.cuda.get_device_name(0)})" if resolved != "cpu"
               else "no GPU: " + ("torch is a CPU build" if not torch.version.cuda
                                  else "torch sees no CUDA device"))
    else:
        why = "asked for"
    if resolved.startswith("cuda") and not torch.cuda.is_available():
        report.broken("device", f"{device} -> {resolved}, but torch sees no CUDA device",
                      "use --device cpu (or \"device\": \"cpu\"), or install a CUDA build of "
                      "torch and the NVIDIA driver")
        return
    report.say("device", f"{device} -> {resolved} ({why})")


def check_memory(report: Report, model: str | None, device: str, dtype: str) -> None:
    """Whether the model fits the device (`dg-engine plan` at one request): in the quantized
    dtype asked for, else in 16 bits; where it does not but would at int4, the fix says so."""
    from engine.models.checkpoint import resolve
    from engine.models.plan import GB, device_memory, plan, read_config
    from engine.serve.socket.endpoint import resolved_device

    resolved = resolved_device(device)
    try:
        name, raw = read_config(resolve(model) / "config.json")
        label, memory = device_memory(resolved)
        kind = "cpu" if resolved == "cpu" else "cuda"
        asked = plan(raw, dtype if dtype in ("int8", "int4") else "bf16", kind, name)
        int4 = plan(raw, "int4", kind, name)
    except Exception:  # noqa: BLE001 - the model and device lines already say what is wrong
        return
    needs = f"{asked.total(1) / GB:.2f} GB in {asked.dtype} at one request"
    where = f"{label} has {memory / GB:.0f} GB"
    if asked.fits(1, memory):
        report.say("memory", f"{needs}; {where} (dg-engine plan)")
    elif int4.fits(1, memory):
        report.broken("memory", f"needs {needs}; {where}",
                      f"use --dtype int4 (\"dtype\": \"int4\"): 4-bit weights, "
                      f"{int4.total(1) / GB:.2f} GB at one request (dg-engine plan)")
    else:
        report.broken("memory", f"needs {needs}, {int4.total(1) / GB:.2f} GB even at int4; "
                      f"{where}", "a device with more memory (dg-engine plan --memory-gb)")


def check_engine(report: Report, model: str | None, device: str, dtype: str) -> None:
    from engine.serve.socket.client import EngineClient, EngineUnavailable
    from engine.serve.socket.endpoint import endpoint_for

    try:
        endpoint = endpoint_for(model, device, dtype)
    except OSError as exc:
        report.broken("engine", str(exc), "fix the runtime directory as the message says")
        return
    if not endpoint.socket.exists() and not endpoint.serving():
        report.say("engine", f"not running (the first completion starts one at "
                   f"{endpoint.socket})")
        _log_tail(report, endpoint.log_path)
        return
    try:
        info = EngineClient(endpoint).hello()
    except (EngineUnavailable, ValueError, OSError) as exc:
        if endpoint.serving():
            report.broken("engine", f"{endpoint.socket}: holds its lock but does not answer "
                          f"({exc})", "it may still be loading; if it stays so, end it "
                          "(kill the `dg-engine serve` process) and it is restarted")
        else:
            report.say("engine", f"not running (a stale socket {endpoint.socket} is removed "
                       "when the next one starts)")
        _log_tail(report, endpoint.log_path)
        return
    pid = info.get("pid")
    report.say("engine", f"running at {endpoint.socket}: pid {pid}, model {info.get('model')}, "
               f"device {info.get('device')}, {info.get('family')} family"
               + _process_facts(pid))
    with contextlib.suppress(EngineUnavailable, ValueError, OSError):
        threads = EngineClient(endpoint).stats().get("cpuThreads")
        if threads:
            report.say("engine threads", f"{threads['threads']} of {threads['mostThreads']}, "
                       f"{threads['threadChoice']}, OMP_WAIT_POLICY {threads['waitPolicy']}")
    _log_tail(report, endpoint.log_path)


def check_team_engine(report: Report, url: str, token_file: str | None) -> None:
    """A team's engine (dg-engine serve --ray): reachable with this token, and its replicas."""
    from engine.serve.socket.client import EngineUnavailable
    from engine.serve.team.command import format_status
    from engine.serve.team.remote import RemoteEngine, shown_url

    try:
        engine = RemoteEngine.connect(url, token_file)
        status = engine.status()
    except (EngineUnavailable, ValueError) as exc:
        report.broken("engine", f"{shown_url(url)}: {exc}",
                      "check the URL, the token file (mode 600, the team's token) and that "
                      "`dg-engine status URL` answers on the head node")
        return
    replicas = status.get("replicas", [])
    if not replicas:
        report.broken("engine", f"{url}: answers but has no replica running",
                      "see the Ray Serve application's logs on the head node")
        return
    report.say("engine", format_status(url, status).replace("\n", "\n" + " " * 13))


def _process_facts(pid: object) -> str:
    """Uptime and resident memory from /proc (Linux); empty where that cannot be read."""
    if not isinstance(pid, int):
        return ""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
    except (OSError, IndexError, StopIteration, ValueError):
        return ""
    started = boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of proc(5)
    rss = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")), "?")
    uptime = int(time.time() - started)
    return f", up {uptime // 3600}h{uptime // 60 % 60:02d}m{uptime % 60:02d}s, " \
           f"RSS {int(rss) // 1024 if rss.isdigit() else '?'} MiB"


def _log_tail(report: Report, log: Path) -> None:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()[-LOG_LINES:]
    except OSError:
        return
    report.say("log", str(log))
    report.lines.extend(f"  | {line}" for line in lines)
