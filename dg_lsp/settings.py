"""Server settings from `initializationOptions` and `workspace/didChangeConfiguration`.

Keys are camelCase, as editors' JSON settings are; they may sit under a `dg-lsp` section.
Every value is checked here, against its range (BOUNDS), and nowhere else. A wrong value is
reported by name and keeps its previous value; it never stops the server.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, replace
from typing import Any

from dg_lsp.context import BLOCK, BRACKETS, COMMENT, HOLE_KINDS, REST_OF_LINE
from engine.types import SAMPLERS, SUFFIX_FRACTION, SamplerSettings

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "int8", "float32", "bfloat16", "float16", "float64")  # engine.Engine.load
# "resident": share the engine process for (model, device) with every editor and CLI, starting
# it when none runs; "inproc": load the model inside this server (tests, one-shot runs). An
# http(s):// URL instead names a team's engine (`dg-engine serve --ray`), reached with the
# token in `engine_token_file`.
ENGINE_MODES = ("resident", "inproc")


@dataclass
class Settings:
    model: str | None = None  # checkpoint folder or hub id; None: the bundled model
    device: str = "auto"
    dtype: str = "auto"  # see engine.Engine.load
    engine: str = "resident"
    engine_token_file: str | None = None  # None: engine.serve.token.default_token_file()
    canvas_length: int = 256  # tokens: context + hole
    hole_size: dict[str, int] = field(default_factory=lambda: {
        REST_OF_LINE: 24, BRACKETS: 24, COMMENT: 24, BLOCK: 96})
    # The suffix's share of the canvas's context; the engine's token cut applies it.
    suffix_fraction: float = SUFFIX_FRACTION
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    debounce_ms: int = 0
    languages: list[str] | None = None  # LSP language ids served; None: all
    extra_context: bool = True  # snippets from other open documents

    def enabled(self, language_id: str) -> bool:
        return self.languages is None or language_id in self.languages


# Every number a client can set, with its range. The ranges are what the engine and the
# pipeline can run: a NaN or infinite temperature reaches the sampler as NaN probabilities,
# a seed of 2**64 overflows the generator, an eosPenalty of 1e308 silences every completion.
@dataclass(frozen=True)
class Bounds:
    low: float
    high: float
    integer: bool = False
    nullable: bool = False  # null is allowed (it means "no limit")

    def admits(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not isinstance(value, int):
            return False
        return math.isfinite(value) and self.low <= value <= self.high

    def __str__(self) -> str:
        if self.integer:
            text = f"an integer in {self.low}..{self.high}"
        else:
            text = f"a finite number in {self.low}..{self.high}"
        return text + " or null" if self.nullable else text


MAX_SEED = 2**63 - 1
# A hole needs context around it: at least this many tokens of the canvas stay for it.
MIN_CONTEXT_TOKENS = 32
BOUNDS = {
    "canvasLength": Bounds(64, 8192, integer=True),
    "suffixFraction": Bounds(0, 0.95),
    "debounceMs": Bounds(0, 5000, integer=True),
    "holeSize": Bounds(1, 1024, integer=True),
    "sampler.k": Bounds(1, 1024, integer=True),
    "sampler.threshold": Bounds(0, 1),
    "sampler.cutoff": Bounds(0, 1),
    "sampler.gamma": Bounds(0, 100),
    "sampler.temperature": Bounds(0, 10),
    "sampler.eosPenalty": Bounds(0, 100),
    "sampler.seed": Bounds(0, MAX_SEED, integer=True),
    "sampler.maxSteps": Bounds(1, 8192, integer=True, nullable=True),
    "sampler.cacheRefresh": Bounds(1, 1024, integer=True),
    "sampler.refreshWindow": Bounds(0, 8192, integer=True, nullable=True),
}

_HOLE_KEYS = {"restOfLine": REST_OF_LINE, "brackets": BRACKETS, "comment": COMMENT,
              "block": BLOCK}
_SAMPLER_KEYS = {"k": "k", "threshold": "threshold", "cutoff": "cutoff", "gamma": "gamma",
                 "temperature": "temperature", "eosPenalty": "eos_penalty", "seed": "seed",
                 "maxSteps": "max_steps", "cacheRefresh": "cache_refresh",
                 "refreshWindow": "refresh_window"}


def _engine_url(value: Any) -> bool:
    """Whether `value` is a team engine's URL (engine.serve.remote.EngineURL)."""
    from engine.serve.remote import EngineURL

    if not isinstance(value, str):
        return False
    try:
        EngineURL.parse(value)
    except ValueError:
        return False
    return True


def check_number(key: str, value: Any) -> str | None:
    """Why `value` is not a valid `key` (a BOUNDS key; hole sizes as holeSize.<kind>)."""
    bounds = BOUNDS[key.split(".")[0] if key.startswith("holeSize.") else key]
    return None if bounds.admits(value) else f"{key}: expected {bounds}, got {value!r}"


def parse_settings(raw: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from a client's JSON, and one message per value that was refused.

    A refused value keeps its value in `base` (the previous valid settings)."""
    base = base or Settings()
    settings = replace(base, hole_size=dict(base.hole_size))
    errors: list[str] = []
    if raw is None:
        return settings, errors
    if not isinstance(raw, dict):
        return settings, [f"settings must be an object, got {type(raw).__name__}"]
    for section in ("dg-lsp", "dgLsp", "dg_lsp"):
        if isinstance(raw.get(section), dict):
            raw = raw[section]
            break

    def check(key: str, ok: bool, expected: str) -> bool:
        if not ok:
            got = raw[key]
            if key == "engine" and isinstance(got, str):  # a URL's password is not repeated
                from engine.serve.remote import shown_url

                got = shown_url(got)
            errors.append(f"{key}: expected {expected}, got {got!r}")
        return ok

    def number(key: str, value: Any) -> bool:
        problem = check_number(key, value)
        if problem:
            errors.append(problem)
        return problem is None

    for key, value in raw.items():
        if key == "model":
            if check(key, value is None or (isinstance(value, str) and value), "a path or id"):
                settings.model = value
        elif key == "device":
            if check(key, value in DEVICES or (isinstance(value, str)
                                              and value.startswith("cuda:")), "auto|cpu|cuda"):
                settings.device = value
        elif key == "dtype":
            if check(key, value in DTYPES, "|".join(DTYPES)):
                settings.dtype = value
        elif key == "engine":
            if check(key, value in ENGINE_MODES or _engine_url(value),
                     " or ".join(ENGINE_MODES) + " or an http(s):// URL"):
                settings.engine = value
        elif key == "engineTokenFile":
            if check(key, value is None or (isinstance(value, str) and value), "a path"):
                settings.engine_token_file = value
        elif key == "canvasLength":
            if number(key, value):
                settings.canvas_length = value
        elif key == "suffixFraction":
            if number(key, value):
                settings.suffix_fraction = float(value)
        elif key == "debounceMs":
            if number(key, value):
                settings.debounce_ms = value
        elif key == "languages":
            if check(key, value is None or (isinstance(value, list)
                                           and all(isinstance(v, str) for v in value)),
                     "a list of language ids"):
                settings.languages = value
        elif key == "extraContext":
            if check(key, isinstance(value, bool), "true or false"):
                settings.extra_context = value
        elif key == "holeSize":
            settings.hole_size = _parse_hole_size(value, settings.hole_size, errors)
        elif key == "sampler":
            settings.sampler = _parse_sampler(value, settings.sampler, errors)
        else:
            errors.append(f"{key}: unknown setting")

    room = settings.canvas_length - MIN_CONTEXT_TOKENS
    too_big = {kind: size for kind, size in settings.hole_size.items() if size > room}
    if too_big:
        # Which of the two changed is not ours to guess: both keep their previous values.
        holes = ", ".join(f"{_HOLE_NAMES[kind]} {size}" for kind, size in too_big.items())
        errors.append(f"holeSize ({holes}) does not fit canvasLength {settings.canvas_length}: "
                      f"a hole may take at most canvasLength - {MIN_CONTEXT_TOKENS} tokens")
        settings.canvas_length, settings.hole_size = base.canvas_length, dict(base.hole_size)
    return settings, errors


_HOLE_NAMES = {kind: key for key, kind in _HOLE_KEYS.items()}


def _parse_hole_size(value: Any, current: dict[str, int], errors: list[str]) -> dict[str, int]:
    sizes = dict(current)
    if not isinstance(value, dict):
        errors.append(f"holeSize: expected an object with {', '.join(_HOLE_KEYS)}")
        return sizes
    for key, size in value.items():
        kind = _HOLE_KEYS.get(key, key if key in HOLE_KINDS else None)
        if kind is None:
            errors.append(f"holeSize.{key}: unknown hole kind")
        elif (problem := check_number(f"holeSize.{key}", size)) is not None:
            errors.append(problem)
        else:
            sizes[kind] = size
    return sizes


def _parse_sampler(value: Any, current: SamplerSettings, errors: list[str]) -> SamplerSettings:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        errors.append(f"sampler: expected an object or one of {', '.join(SAMPLERS)}")
        return current
    sampler = replace(current)
    for key, v in value.items():
        if key == "name":
            if v in SAMPLERS:
                sampler.sampler = v
            else:
                errors.append(f"sampler.name: expected one of {', '.join(SAMPLERS)}, got {v!r}")
        elif key not in _SAMPLER_KEYS:
            errors.append(f"sampler.{key}: unknown sampler setting")
        elif (problem := check_number(f"sampler.{key}", v)) is not None:
            errors.append(problem)
        else:
            setattr(sampler, _SAMPLER_KEYS[key], v)
    return sampler


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --device, --dtype and --seed, as every one-shot command takes them."""
    parser.add_argument("--model", default=None,
                        help="checkpoint folder or hub id (default: the bundled model)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps")
    parser.add_argument("--dtype", default="auto",
                        help="auto (int8 linear layers on the CPU, bfloat16 on a GPU), int8, "
                        "float32, bfloat16, float16, float64")
    parser.add_argument("--seed", type=_seed, default=0, help="sampler seed (default 0)")


def _seed(text: str) -> int:
    """--seed, held to the same range as the sampler.seed setting."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    problem = check_number("sampler.seed", value)
    if problem:
        raise argparse.ArgumentTypeError(problem.removeprefix("sampler.seed: "))
    return value


def settings_from_arguments(args: argparse.Namespace, **fields: Any) -> Settings:
    """The server's default settings with a command's --model, --device, --dtype and --seed."""
    settings = Settings(model=args.model, device=args.device, dtype=args.dtype, **fields)
    settings.sampler = replace(settings.sampler, seed=args.seed)
    return settings
