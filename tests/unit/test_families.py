"""One decoder per family, chosen once at load: what Engine and the scheduler both go through."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import Engine
from engine.decode.families import ARDecoder, MaskedDecoder, decoder_for
from engine.decode.sequence import Sequence
from engine.text.tokenizer import EOS
from engine.types import InfillRequest, SamplerSettings


@pytest.fixture(scope="module")
def engines(dream_ckpt: Path, ar_ckpt: Path) -> dict[str, Engine]:
    """An engine of each transformer family, by family (float32: the exact CPU path)."""
    return {family: Engine.load(str(ckpt), device="cpu", dtype="float32")
            for family, ckpt in (("masked", dream_ckpt), ("ar", ar_ckpt))}


def test_the_family_picks_the_decoder_and_the_engine_says_so(engines: dict[str, Engine]
                                                              ) -> None:
    masked, ar = engines["masked"], engines["ar"]
    assert type(masked.decoder) is MaskedDecoder and type(ar.decoder) is ARDecoder
    for engine, family in ((masked, "masked"), (ar, "ar")):
        info = engine.engine_info
        assert (info.family, info.device, info.resident, info.counts_tokens) == (
            family, "cpu", False, True)
    with pytest.raises(ValueError, match="unknown model family 'nope'"):
        decoder_for("nope")


def test_only_the_masked_family_gives_the_scheduler_a_batchable_denoiser(
    engines: dict[str, Engine]
) -> None:
    masked, ar = engines["masked"], engines["ar"]
    request = InfillRequest("x = ", "\n", 4, SamplerSettings(), 64)
    masked_seq = masked.decoder.start(Sequence(request))
    ar_seq = ar.decoder.start(Sequence(request))
    # The masked step's canvas and rules (what the runner may batch); the AR baseline's drafts.
    assert masked_seq.rules is not None and masked_seq.drafts is None
    assert ar_seq.rules is None and ar_seq.drafts is not None


def test_stop_ids_are_the_models_and_results_end_at_them(engines: dict[str, Engine]) -> None:
    masked, ar = engines["masked"], engines["ar"]
    assert masked.decoder.stop_ids() == masked.config.stop_token_ids
    assert ar.tokenizer.token_id(EOS) in ar.decoder.stop_ids()  # the FIM template's end
    for engine in (masked, ar):
        result = engine.infill("def f(x):\n    return ", "\n", max_tokens=6)
        assert not set(result.token_ids) & engine.decoder.stop_ids()
