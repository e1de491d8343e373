"""What the HTTP API tests ask of any dg-engine URL (one machine's `--http`, a team's): the
official OpenAI client's completions, whole and streamed, are the engine's text in process,
and a streamed answer's deltas add up to the answer the same request gets whole."""

from __future__ import annotations

import json
from typing import Any

import httpx

# Requests whose streamed deltas must add up to the whole answer: a hole between a prefix and
# a suffix, holes of a few tokens, stop strings, on both APIs, at the HTTP port's defaults
# (each asked whole, then streamed: the second may not answer otherwise for coming second).
STREAMED_REQUESTS = [
    ("/v1/completions", {"prompt": "def fib(n):\n    return ", "suffix": "\n\nprint(fib(9))\n",
                         "max_tokens": 8}),
    ("/v1/completions", {"prompt": "def fib(n):\n    return ", "suffix": ")\n",
                         "max_tokens": 2}),
    ("/v1/completions", {"prompt": "class Fib:\n    ", "suffix": "\n", "max_tokens": 16,
                         "stop": ["\n\n", "e", "()"]}),
    ("/infill", {"input_prefix": "x = fib(", "input_suffix": ")\nprint(x)\n",
                 "n_predict": 8}),
    ("/infill", {"input_prefix": "import os\n", "prompt": "path = os.", "input_suffix": "\n",
                 "n_predict": 3, "stop": ["a", "\n"]}),
]


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


def answer_text(path: str, answer: dict[str, Any]) -> str:
    """The text of a whole answer or a streamed chunk of `path`'s API."""
    return answer["content"] if path == "/infill" else answer["choices"][0]["text"]


def whole_and_streamed(base: str, path: str, body: dict[str, Any], headers: dict[str, str],
                       ) -> tuple[str, list[str]]:
    """`body` asked of `base` + `path` whole and streamed: (the whole answer's text, the
    streamed deltas, the last chunk's empty one included)."""
    whole = httpx.post(f"{base}{path}", json=body, headers=headers, timeout=120)
    assert whole.status_code == 200, whole.text
    deltas = []
    with httpx.stream("POST", f"{base}{path}", json=body | {"stream": True}, headers=headers,
                      timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line.removeprefix("data: "))
                assert "error" not in chunk, chunk
                deltas.append(answer_text(path, chunk))
    return answer_text(path, whole.json()), deltas


def check_streams_add_up(base: str, headers: dict[str, str]) -> None:
    """Each of STREAMED_REQUESTS, and the first again with a stop string its answer holds:
    the streamed deltas add up to the whole answer."""
    for path, body in STREAMED_REQUESTS:
        whole, deltas = whole_and_streamed(base, path, body, headers)
        assert "".join(deltas) == whole, (path, body, deltas)
    path, body = STREAMED_REQUESTS[0]
    text, _ = whole_and_streamed(base, path, body, headers)
    if len(text) > 2:
        body = body | {"stop": [text[1:3]]}
        whole, deltas = whole_and_streamed(base, path, body, headers)
        assert whole == text[:text.find(text[1:3])]
        assert "".join(deltas) == whole, (path, body, deltas)
