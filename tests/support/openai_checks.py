"""What the HTTP API tests ask of any dg-engine URL (one machine's `--http`, a team's): the
official OpenAI client's completions, whole and streamed, are the engine's text in process."""

from __future__ import annotations

from typing import Any


def check_completions(api: Any, model: str, inproc: Any, whole: str, streamed: str,
                      suffix: str) -> list[Any]:
    """`whole` completed in one answer and `streamed` chunk by chunk, both against
    `inproc.infill` with the same request (8 tokens, seed 0); the streamed chunks."""
    expected = inproc.infill(whole, suffix, 8, seed=0).text
    answer = api.completions.create(model=model, prompt=whole, suffix=suffix, max_tokens=8,
                                    seed=0)
    assert answer.choices[0].text == expected
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert answer.model_extra["dg"]["passes"] >= 1

    expected = inproc.infill(streamed, suffix, 8, seed=0).text
    chunks = list(api.completions.create(model=model, prompt=streamed, suffix=suffix,
                                         max_tokens=8, seed=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert "dg" in chunks[-1].model_extra
    return chunks
