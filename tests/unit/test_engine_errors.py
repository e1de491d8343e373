"""The engine's error codes arrive as exception types: callers retry or give up on the type."""

from __future__ import annotations

import pickle

import pytest

from dg_lsp.actions.targets import DOCSTRING
from dg_lsp.batch.job import BatchJob, process_file
from engine.serve.socket.client import EngineBusy, EngineRefused, EngineUnavailable, raise_error
from tests.support.scripted import Scripted


@pytest.mark.parametrize(("code", "kind"), [
    ("busy", EngineBusy), ("bad-request", EngineRefused), ("too-large", EngineRefused),
    ("version", EngineRefused), ("failed", EngineUnavailable)])
def test_each_error_code_raises_its_type_with_the_code(code: str, kind: type) -> None:
    with pytest.raises(kind) as raised:
        raise_error({"type": "error", "id": 1, "code": code, "message": "why"})
    assert raised.value.code == code and "why" in str(raised.value)
    assert isinstance(raised.value, ValueError) == (kind is EngineRefused)
    again = pickle.loads(pickle.dumps(raised.value))  # Ray carries batch records between hosts
    assert type(again) is kind and again.code == code


def test_a_busy_target_is_recorded_with_its_exception_for_the_retry() -> None:
    class Busy(Scripted):
        def infill_stream(self, request, cancel=None, document=None):
            raise EngineBusy("the queue is full")

    text = "def f(a):\n    return a\n"
    (record,) = process_file(Busy(), "s.py", text, BatchJob(DOCSTRING)).records
    assert record.result == "error: EngineBusy: the queue is full"
    assert isinstance(record.error, EngineBusy)
    assert "error" not in record.to_json()
