"""Server settings from `initializationOptions` and `workspace/didChangeConfiguration`.

Keys are camelCase, as editors' JSON settings are; they may sit under a `dg-lsp` section.
Each value is structured by cattrs into its field's type, then checked against the field's
metadata: its range (engine.bounds, the one table the engine's wire parser reads too) or its
choices. A wrong value is reported by name and keeps its previous value; it never stops the
server. Unknown keys are reported in one message, the first few by name.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import cattrs

from dg_lsp.context import BLOCK, BRACKETS, COMMENT, REST_OF_LINE
from engine.bounds import (
    CANVAS_LENGTH_RANGE,
    HOLE_SIZE_RANGE,
    MIN_CONFIDENCE_RANGE,
    SUFFIX_FRACTION_RANGE,
    Bounds,
    bounded,
    bounded_argument,
    bounds_of,
)
from engine.options import DTYPES, add_model_options
from engine.serve.token import INHERITED_TIMEOUT, MAX_FILE, inherited_descriptor
from engine.types import CANVAS_LENGTH, SAMPLERS, SUFFIX_FRACTION, SamplerSettings

DEVICES = ("auto", "cpu", "cuda", "mps")
# "resident": share the engine process for (model, device) with every editor and CLI, starting
# it when none runs; "inproc": load the model inside this server (tests, one-shot runs). An
# http(s):// URL instead names a team's engine (`dg-engine serve --ray`), reached with the
# token in `engine_token_file`.
ENGINE_MODES = ("resident", "inproc")
# docs/usage.md, "Confidence gate": the calibrated probability (dg_lsp.document.gate) the rule
# picks on
# the bench's held-out cursors (`dg-lsp bench --section gate`).
DEFAULT_MIN_CONFIDENCE = 0.15


def _engine_url(value: str) -> bool:
    """Whether `value` is a team engine's URL (engine.serve.team.remote.EngineURL)."""
    from engine.serve.team.remote import EngineURL

    try:
        EngineURL.parse(value)
    except ValueError:
        return False
    return True


def _token_file(value: Any) -> bool:
    """A path the server may read the token from at every connect: a file, not a descriptor
    handed to a one-shot command (engine.serve.token.inherited_descriptor), which is read once
    (and the server's standard input is its LSP stream)."""
    return value is None or (value != "" and inherited_descriptor(value) is None)


def checked(default: Any, expected: str, ok: Callable[[Any], bool],
            shown: Callable[[Any], Any] = lambda v: v) -> Any:
    """A field whose values `ok` admits, described to the user as `expected`; a refused
    value is quoted as `shown` renders it."""
    return field(default=default, metadata={"expected": expected, "ok": ok, "shown": shown})


def _shown_url(value: Any) -> Any:
    """A refused engine URL without its password (engine.serve.team.remote.shown_url)."""
    from engine.serve.team.remote import shown_url

    return shown_url(value) if isinstance(value, str) else value


@dataclass
class Settings:
    # checkpoint folder or hub id; None: the bundled model
    model: str | None = checked(None, "a path or id", lambda v: v is None or v != "")
    device: str = checked("auto", "auto|cpu|cuda",
                          lambda v: v in DEVICES or v.startswith("cuda:"))
    dtype: str = checked("auto", "|".join(DTYPES), lambda v: v in DTYPES)  # engine.Engine.load
    engine: str = checked("resident", " or ".join(ENGINE_MODES) + " or an http(s):// URL",
                          lambda v: v in ENGINE_MODES or _engine_url(v), shown=_shown_url)
    # None: engine.serve.token.default_token_file(). A command line may also name a descriptor
    # ("-", /dev/fd/N); the language server reads the file again at every reconnect, so its
    # setting must be a file.
    engine_token_file: str | None = checked(
        None, "the path of a token file (not - or /dev/fd/N: the server reads it again at "
        "every reconnect)", _token_file)
    canvas_length: int = bounded(CANVAS_LENGTH, CANVAS_LENGTH_RANGE)  # tokens: context + hole
    hole_size: dict[str, int] = field(default_factory=lambda: {
        REST_OF_LINE: 24, BRACKETS: 24, COMMENT: 24, BLOCK: 96})
    # The suffix's share of the canvas's context; the engine's token cut applies it.
    suffix_fraction: float = bounded(SUFFIX_FRACTION, SUFFIX_FRACTION_RANGE)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    debounce_ms: int = bounded(0, Bounds(0, 5000, integer=True))
    languages: list[str] | None = checked(None, "a list of language ids",
                                          lambda v: v is None or isinstance(v, list))
    extra_context: bool = checked(True, "true or false", lambda v: True)  # other open documents
    # The rest of the workspace (dg_lsp.repository): other files' alike lines as the model's
    # choices, the definitions of names the cursor's line uses; false: the open file and the
    # other open documents only.
    repository_context: bool = checked(True, "true or false", lambda v: True)
    # A completion whose calibrated probability of being close to right is below this is not
    # shown (dg_lsp.document.gate.hides); 0 shows everything. The default is chosen on held-out
    # cursors by the rule in docs/usage.md, "Confidence gate".
    min_confidence: float = bounded(DEFAULT_MIN_CONFIDENCE, MIN_CONFIDENCE_RANGE)
    # The gate for code actions, rewrites and batch edits, on the least confident token
    # (dg_lsp.document.gate.refusal). 0 by default: no held-out measurement says where a rewrite's
    # score separates right from wrong (docs/usage.md).
    min_edit_confidence: float = bounded(0.0, MIN_CONFIDENCE_RANGE)

    def enabled(self, language_id: str) -> bool:
        return self.languages is None or language_id in self.languages


# A hole needs context around it: at least this many tokens of the canvas stay for it.
MIN_CONTEXT_TOKENS = 32

_HOLE_KEYS = {"restOfLine": REST_OF_LINE, "brackets": BRACKETS, "comment": COMMENT,
              "block": BLOCK}
_HOLE_NAMES = {kind: key for key, kind in _HOLE_KEYS.items()}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _strict(kind: type) -> Callable[[Any, type], Any]:
    """cattrs' own hooks convert ("5" -> 5, 2.7 -> 2, "ab" -> ["a", "b"]): a setting of the
    wrong JSON type is refused instead."""
    def structure(value: Any, _: type) -> Any:
        if isinstance(value, bool) is not (kind is bool) or not isinstance(
                value, (int, float) if kind is float else kind):
            raise TypeError(f"expected {kind.__name__}")
        return value
    return structure


_converter = cattrs.Converter()
for _kind in (bool, int, float, str):
    _converter.register_structure_hook(_kind, _strict(_kind))
_converter.register_structure_hook_func(
    lambda kind: kind == list[str],
    lambda v, _: [_converter.structure(x, str) for x in _strict(list)(v, list)])


# A message names at most this many unknown keys (a project's settings may hold thousands,
# and the user is shown the message), each cut to SHOWN_CHARS characters, as are refused values.
SHOWN_KEYS = 5
SHOWN_CHARS = 60


@functools.cache
def _fields(kind: type) -> dict[str, tuple[dataclasses.Field, Any]]:
    """camelCase key -> (field, its type) of dataclass `kind`: type hints resolved once, not
    once per key (a settings object of many keys was slow)."""
    hints = typing.get_type_hints(kind)
    return {camel(f.name): (f, hints[f.name]) for f in dataclasses.fields(kind)}


def _brief(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


def unknown_keys(where: str, keys: list[str], what: str) -> str:
    """One message for all of `keys`, unknown `what`s: the first few named, the rest counted."""
    if len(keys) == 1:
        return f"{_brief(where + keys[0])}: unknown {what}"
    named = ", ".join(_brief(where + key) for key in keys[:SHOWN_KEYS])
    more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
    return f"{len(keys)} unknown {what}s: {named}{more}"


def _apply(obj: Any, raw: dict[str, Any], where: str, errors: list[str],
           nested: dict[str, Callable[[Any, Any, list[str]], Any]] | None = None) -> Any:
    """A copy of dataclass `obj` with the camelCase keys of `raw` that pass their field's
    type and checks; in `errors`, in key order, a message for each value that does not, and
    one for all unknown keys. `nested`: keys whose value is an object of its own, parsed by
    its function (value, current value, errors) -> new value."""
    fields = _fields(type(obj))
    changes: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in raw.items():
        f, kind = fields.get(key, (None, None))
        if nested and key in nested and f is not None:
            changes[f.name] = nested[key](value, getattr(obj, f.name), errors)
            continue
        if f is None or f.name in ("hole_size", "sampler"):
            unknown.append(key)
            continue
        bounds, expected = f.metadata.get("bounds"), f.metadata.get("expected")
        try:
            value = _converter.structure(value, kind)
            ok = bounds.admits(value) if bounds else f.metadata["ok"](value)
        except Exception:
            ok = False
        if ok:
            changes[f.name] = value
        else:
            shown = f.metadata.get("shown", lambda v: v)(raw[key])
            errors.append(f"{where}{key}: expected {bounds or expected}, "
                          f"got {_brief(repr(shown))}")
    if unknown:
        errors.append(unknown_keys(where, unknown, "sampler setting" if where else "setting"))
    return replace(obj, **changes)


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

    settings = _apply(settings, raw, "", errors,
                      {"holeSize": _parse_hole_size, "sampler": _parse_sampler})

    room = settings.canvas_length - MIN_CONTEXT_TOKENS
    too_big = {kind: size for kind, size in settings.hole_size.items() if size > room}
    if too_big:
        # Which of the two changed is not ours to guess: both keep their previous values.
        holes = ", ".join(f"{_HOLE_NAMES[kind]} {size}" for kind, size in too_big.items())
        errors.append(f"holeSize ({holes}) does not fit canvasLength {settings.canvas_length}: "
                      f"a hole may take at most canvasLength - {MIN_CONTEXT_TOKENS} tokens")
        settings.canvas_length, settings.hole_size = base.canvas_length, dict(base.hole_size)
    return settings, errors


def _parse_hole_size(value: Any, current: dict[str, int], errors: list[str]) -> dict[str, int]:
    sizes = dict(current)
    if not isinstance(value, dict):
        errors.append(f"holeSize: expected an object with {', '.join(_HOLE_KEYS)}")
        return sizes
    unknown = []
    for key, size in value.items():
        kind = _HOLE_KEYS.get(key, key if key in _HOLE_NAMES else None)
        if kind is None:
            unknown.append(key)
        elif (problem := HOLE_SIZE_RANGE.problem(f"holeSize.{key}", size)) is not None:
            errors.append(problem)
        else:
            sizes[kind] = size
    if unknown:
        errors.append(unknown_keys("holeSize.", unknown, "hole kind"))
    return sizes


def _parse_sampler(value: Any, current: SamplerSettings, errors: list[str]) -> SamplerSettings:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        errors.append(f"sampler: expected an object or one of {', '.join(SAMPLERS)}")
        return current
    value = dict(value)
    sampler = current
    if "name" in value:
        name = value.pop("name")
        if name in SAMPLERS:
            sampler = replace(sampler, sampler=name)
        else:
            errors.append(f"sampler.name: expected one of {', '.join(SAMPLERS)}, "
                          f"got {_brief(repr(name))}")
    # Fields the engine sets per request, not the user.
    internal = {camel(n) for n in ("sampler", "share_prefix", "min_tokens", "stop_run")}
    for key in internal & set(value):
        errors.append(f"sampler.{key}: unknown sampler setting")
        del value[key]
    return _apply(sampler, value, "sampler.", errors)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --device, --dtype and --seed, as every one-shot command takes them."""
    add_model_options(parser)
    parser.add_argument("--seed", type=_seed, default=0, help="sampler seed (default 0)")


TOKEN_FILE_HELP = (
    "the team engine's token (with --engine URL): a private file (yours, mode 0600; default "
    "~/.config/dg-engine/token), or a descriptor handed over by CI: '-' for standard input "
    "(which then carries nothing else) or /dev/fd/N (bash: --token-file <(printenv DG_TOKEN)). "
    f"A pipe is read without the owner and mode check, without blocking, for at most "
    f"{INHERITED_TIMEOUT:g} s and {MAX_FILE} bytes; its first line is the token. The token is "
    "never printed or logged")
ENGINE_HELP = {"inproc": "inproc: load the model in this process",
               "resident": "resident: the resident engine for the model, started if none runs"}


def add_engine_arguments(parser: argparse.ArgumentParser, modes: tuple[str, ...],
                         default: str) -> None:
    """--engine (one of `modes`, or a team engine's http(s):// URL) and --token-file, as
    `dg-lsp serve` takes them; dg_lsp.engines.open_backend turns them into the engine."""
    parser.add_argument("--engine", type=engine_argument(modes), default=default,
                        metavar="|".join((*modes, "URL")),
                        help="; ".join(ENGINE_HELP[m] for m in modes) + "; or a team's "
                        "engine at http(s)://HOST:PORT (dg-engine serve --ray), whose model, "
                        f"device and dtype are the deployment's (default: {default})")
    parser.add_argument("--token-file", default=None, metavar="FILE|-", help=TOKEN_FILE_HELP)


def engine_argument(modes: tuple[str, ...]) -> Callable[[str], str]:
    """An argparse `type` for --engine: one of `modes` or a team engine's URL. A refused
    value is not repeated (a URL may hold a password: engine.serve.team.remote.EngineURL)."""
    def parse(text: str) -> str:
        if text in modes:
            return text
        from engine.serve.team.remote import EngineURL, is_engine_url

        if not is_engine_url(text):
            raise argparse.ArgumentTypeError(f"expected {', '.join(modes)} or an "
                                             "http(s)://HOST:PORT URL")
        try:
            EngineURL.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    return parse


def sampler_argument(name: str) -> Callable[[str], int | float]:
    """An argparse `type` for SamplerSettings field `name`, held to its range."""
    return bounded_argument(bounds_of(SamplerSettings)[name])


_seed = sampler_argument("seed")


def settings_from_arguments(args: argparse.Namespace, **fields: Any) -> Settings:
    """The server's default settings with a command's --model, --device, --dtype and --seed."""
    settings = Settings(model=args.model, device=args.device, dtype=args.dtype, **fields)
    settings.sampler = replace(settings.sampler, seed=args.seed)
    return settings
