"""`dg-lsp bench --load`: the load specs it takes. The load's processes:
tests/integration/test_bench_load.py."""

from __future__ import annotations

import pytest

from dg_lsp.measure.bench_load import describe, parse_load


def test_a_load_spec_is_parsed_or_refused_by_name():
    assert parse_load("busy") == ("busy", 1)
    assert parse_load("busy:3") == ("busy", 3)
    for spec, why in (("spin:1", "expected busy:N or compile:N"), ("busy:x", "expected busy"),
                      ("busy:0", "N must be in 1..64"), ("busy:65", "N must be in 1..64")):
        with pytest.raises(ValueError, match=why):
            parse_load(spec)
    assert describe("busy", 1) == "1 busy process"
    assert describe("compile", 2) == "2 compile loops (cc -O2)"
