"""Every setting is checked against its range in one place; a refused one keeps its value."""

from __future__ import annotations

import argparse
import math

import pytest

from dg_lsp.settings import Settings, add_model_arguments, parse_settings


@pytest.mark.parametrize("raw, message", [
    ({"sampler": {"seed": 2**64}},
     "sampler.seed: expected an integer in 0..9223372036854775807, got 18446744073709551616"),
    ({"sampler": {"seed": -1}},
     "sampler.seed: expected an integer in 0..9223372036854775807, got -1"),
    ({"sampler": {"eosPenalty": 1e308}},
     "sampler.eosPenalty: expected a finite number in 0..100, got 1e+308"),
    ({"sampler": {"temperature": math.nan}},
     "sampler.temperature: expected a finite number in 0..10, got nan"),
    ({"sampler": {"temperature": math.inf}},
     "sampler.temperature: expected a finite number in 0..10, got inf"),
    ({"sampler": {"threshold": -math.inf}},
     "sampler.threshold: expected a finite number in 0..1, got -inf"),
    ({"sampler": {"cacheRefresh": 0}},
     "sampler.cacheRefresh: expected an integer in 1..1024, got 0"),
    ({"sampler": {"maxSteps": 2.5}},
     "sampler.maxSteps: expected an integer in 1..8192 or null, got 2.5"),
    ({"sampler": {"k": True}}, "sampler.k: expected an integer in 1..1024, got True"),
    ({"canvasLength": 32}, "canvasLength: expected an integer in 64..8192, got 32"),
    ({"suffixFraction": math.nan},
     "suffixFraction: expected a finite number in 0..0.95, got nan"),
    ({"holeSize": {"block": 300}},
     "holeSize (block 300) does not fit canvasLength 256: a hole may take at most "
     "canvasLength - 32 tokens"),
    ({"canvasLength": 100},
     "holeSize (block 96) does not fit canvasLength 100: a hole may take at most "
     "canvasLength - 32 tokens"),
])
def test_out_of_range_settings_are_refused_by_name_and_the_previous_values_kept(raw, message):
    previous, _ = parse_settings({"sampler": {"seed": 7}, "holeSize": {"restOfLine": 8}})
    settings, errors = parse_settings(raw, previous)
    assert errors == [message]
    assert settings == previous


def test_a_hole_that_fits_once_the_canvas_grows_is_accepted_in_the_same_change():
    settings, errors = parse_settings({"holeSize": {"block": 1000}, "canvasLength": 2048,
                                       "sampler": {"maxSteps": None, "seed": 2**63 - 1}})
    assert errors == []
    assert (settings.hole_size["block"], settings.canvas_length) == (1000, 2048)
    assert (settings.sampler.max_steps, settings.sampler.seed) == (None, 2**63 - 1)


def test_valid_values_apply_next_to_refused_ones():
    settings, errors = parse_settings({"debounceMs": 30, "sampler": {"temperature": -1,
                                                                     "k": 2}})
    assert errors == ["sampler.temperature: expected a finite number in 0..10, got -1"]
    assert (settings.debounce_ms, settings.sampler.k, settings.sampler.temperature) == (
        30, 2, Settings().sampler.temperature)


@pytest.mark.parametrize("seed", ["-1", str(2**64), "x"])
def test_the_command_line_seed_has_the_same_range(seed, capsys):
    parser = argparse.ArgumentParser(prog="dg-lsp complete")
    add_model_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--seed", seed])
    assert "argument --seed: expected an integer" in capsys.readouterr().err


def test_the_engine_may_be_a_team_engines_url_without_credentials():
    settings, errors = parse_settings({"engine": "https://head:8000",
                                       "engineTokenFile": "~/.dg-token"})
    assert not errors
    assert (settings.engine, settings.engine_token_file) == ("https://head:8000", "~/.dg-token")
    for bad in ("ftp://head", "https://me:token@head:8000", "https://head:8000/?token=x",
                "remote", 7):
        settings, errors = parse_settings({"engine": bad})
        assert settings.engine == "resident" and len(errors) == 1


@pytest.mark.parametrize("change", [{"model": "/other/model"}, {"device": "cpu"},
                                    {"dtype": "float32"}, {"engine": "inproc"},
                                    {"engineTokenFile": "/t/token"}])
def test_a_setting_that_names_another_engine_drops_the_loaded_one(change):
    """The next request loads the engine the new settings name (a dtype change too)."""
    from dg_lsp.lsp.server import create_server

    server = create_server()
    loaded = object()
    server.engine._backend = loaded  # as after a load
    server.apply_settings({"debounceMs": 10})
    assert server.engine._backend is loaded
    server.apply_settings(change)
    assert server.engine._backend is None


def test_one_range_per_setting_for_the_editor_the_wire_and_the_command_line(capsys):
    """The language server, the engine's wire parser and the CLIs refuse the same value with
    the same words, read from the field's metadata (engine.bounds)."""
    from engine.serve.admit import ProtocolError, settings

    _, errors = parse_settings({"sampler": {"temperature": 11}})
    assert errors == ["sampler.temperature: expected a finite number in 0..10, got 11"]
    with pytest.raises(ProtocolError) as refused:
        settings({"temperature": 11})
    assert str(refused.value) == "settings.temperature: expected a finite number in 0..10, got 11"
    parser = argparse.ArgumentParser(prog="dg-lsp eval")
    from dg_lsp.settings import sampler_argument

    parser.add_argument("--temperature", type=sampler_argument("temperature"))
    with pytest.raises(SystemExit):
        parser.parse_args(["--temperature", "11"])
    assert "argument --temperature: expected a finite number in 0..10, got 11" in (
        capsys.readouterr().err)


def test_a_string_is_not_a_number_nor_a_list():
    """cattrs alone would structure "5" as 5 and "py" as ["p", "y"]."""
    settings, errors = parse_settings({"debounceMs": "5", "languages": "py",
                                       "extraContext": 1})
    assert errors == ["debounceMs: expected an integer in 0..5000, got '5'",
                      "languages: expected a list of language ids, got 'py'",
                      "extraContext: expected true or false, got 1"]
    assert settings == Settings()


def test_the_vs_code_extension_offers_the_same_ranges_and_defaults():
    """VS Code's settings UI checks what package.json declares: it must be the table's."""
    import json
    from pathlib import Path

    from engine.bounds import bounds_of
    from engine.types import SamplerSettings

    package = json.loads((Path(__file__).resolve().parents[2] / "editors" / "vscode"
                          / "package.json").read_text())
    properties = package["contributes"]["configuration"]["properties"]
    table = bounds_of(SamplerSettings)
    declared = {key.removeprefix("dg-lsp.sampler."): spec for key, spec in properties.items()
                if key.startswith("dg-lsp.sampler.") and "minimum" in spec}
    assert sorted(declared) == ["cutoff", "temperature", "threshold"]
    for name, spec in declared.items():
        bounds = table[name]
        assert (spec["minimum"], spec.get("maximum"), spec["default"]) == (
            bounds.low, bounds.high, getattr(SamplerSettings(), name)), name
    gate = properties["dg-lsp.minConfidence"]
    bounds = bounds_of(Settings)["min_confidence"]
    assert (gate["minimum"], gate["maximum"], gate["default"]) == (
        bounds.low, bounds.high, Settings().min_confidence)


def test_thousands_of_unknown_keys_are_reported_once_and_briefly():
    """A project's settings may carry 30,000 keys dg-lsp does not know: one short message, the
    first few named and the rest counted (base showed one of 799 KB, after 4 s), and the
    known ones still apply."""
    from lsprotocol import types

    from dg_lsp.lsp.server import create_server

    server = create_server()
    shown: list[tuple[types.MessageType, str]] = []
    server.window_show_message = lambda params: shown.append((params.type, params.message))
    raw = {f"project.key{i}": i for i in range(30_000)}
    raw.update({"debounceMs": 20, "x" * 100_000: 1, "canvasLength": "y" * 100_000,
                "sampler": {f"knob{i}": 1 for i in range(7)},
                "holeSize": {"block": 64, "huge": 1, "tiny": 2}})
    server.apply_settings({"dg-lsp": raw})
    assert shown == [(types.MessageType.Warning,
                      "dg-lsp: invalid settings ignored, previous values kept: "
                      f"canvasLength: expected an integer in 64..8192, got '{'y' * 58}…; "
                      "7 unknown sampler settings: sampler.knob0, sampler.knob1, "
                      "sampler.knob2, sampler.knob3, sampler.knob4 and 2 more; "
                      "2 unknown hole kinds: holeSize.huge, holeSize.tiny; "
                      "30001 unknown settings: project.key0, project.key1, project.key2, "
                      f"project.key3, project.key4 and 29996 more")]
    assert len(shown[0][1]) < 600
    assert (server.settings.debounce_ms, server.settings.hole_size["block"]) == (20, 64)
    _, errors = parse_settings({"x" * 100_000: 1})
    assert errors == [f"{'x' * 59}…: unknown setting"]
