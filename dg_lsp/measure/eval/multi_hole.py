"""`dg-lsp eval --suite multi-hole`: several holes of one function, filled three ways.

A case is a function of a held-out package with 2 or 3 of its one-line statements cut out
(tree-sitter finds them: never two on neighbouring lines, at most MAX_KEPT_CHARS of code
between the first and the last). A hole is cut one of two ways (`--cut`):

- statement (the default): the statement alone, its line's indentation left before the hole
  and its newline after it. It is what editors send: the fill action's hole is a stub from its
  indentation to its line's end (dg_lsp.actions.stubs), and a cursor on an emptied line stands
  after the indentation with the newline after it (dg_lsp.completion.cursors);
- line: the whole line, indentation and newline included: HumanEval-Infilling's single-line
  shape, which the single-line cases cut (engine.data.cases). Its hole ends in a newline and
  the code after it starts with bare indentation, a token boundary the training rows never
  have (a line's newline and the next line's indentation are one token there).

Each way fills every hole of the case with one engine:

- joint: one HolesRequest (engine.types): the holes denoised together in one canvas, each
  seeing the others' text as it forms;
- sequential: one InfillRequest per hole, in order, each with the fills before it written into
  its prefix and the later holes' lines missing from its suffix (what an autoregressive tool
  does);
- independent: one InfillRequest per hole with every other hole's line missing.

Every hole is a single-line hole of the same size, ended at its line (UnitEnd "line"), and
scored as the single-line cases are (dg_lsp.measure.eval.scoring): its fill cut at its first
newline (`HolesCase.written`), exact after whitespace normalization, and its edit similarity.
Per way: holes, holes exactly right, cases with every hole right, the holes' mean edit
similarity (what says "as right" where few holes are exactly right), forward passes in all,
and the median milliseconds a case's holes took together.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dg_lsp.measure.eval.scoring import edit_similarity, exact_match
from dg_lsp.syntax.languages import language_for
from engine.backend import Backend
from engine.data.cases import source_files
from engine.types import HolesRequest, InfillRequest, SamplerSettings, UnitEnd, last_draft

MODES = ("joint", "sequential", "independent")
LINE = UnitEnd("line")
# Statements that are one line and say something a model can infer from the code around them.
STATEMENTS = {"expression_statement", "return_statement", "raise_statement",
              "assert_statement", "delete_statement", "global_statement",
              "nonlocal_statement"}
PREFIX_CHARS, SUFFIX_CHARS = 2000, 1000  # context kept around a case, as engine.data.cases does
# The code between a case's first and last hole: it travels whole in the joint canvas, and
# must leave the holes and some context room in the editor's 256 tokens.
MAX_KEPT_CHARS = 400
STATEMENT, WHOLE_LINE = "statement", "line"  # how a hole is cut from its line (above)
CUTS = (STATEMENT, WHOLE_LINE)


@dataclass(frozen=True)
class HolesCase:
    id: str  # file:line of the first hole
    texts: tuple[str, ...]  # the prefix, the code between the holes, the suffix
    middles: tuple[str, ...]  # what each hole held: its statement, or its line (`cut`)
    cut: str = STATEMENT

    def written(self, fill: str) -> str:
        """A fill as the hole holds it: cut at its first newline, kept where the hole is a
        whole line."""
        line = fill.split("\n", 1)[0]
        return line + "\n" if self.cut == WHOLE_LINE else line


@dataclass
class ModeTally:
    holes: int = 0
    holes_exact: int = 0
    all_right: int = 0
    similarity: float = 0.0  # summed over the holes
    passes: int = 0
    ms: list[float] | None = None

    def add(self, lines: list[str], middles: tuple[str, ...], passes: int, ms: float) -> None:
        """One case: its holes' fills as written (HolesCase.written), their true texts."""
        right = [exact_match(line, m) for line, m in zip(lines, middles, strict=True)]
        self.similarity += sum(edit_similarity(line, m)
                               for line, m in zip(lines, middles, strict=True))
        self.holes += len(right)
        self.holes_exact += sum(right)
        self.all_right += all(right)
        self.passes += passes
        self.ms = [*(self.ms or []), ms]

    def to_dict(self) -> dict[str, float | int]:
        return {"holes": self.holes, "holes_exact": self.holes_exact,
                "all_right": self.all_right,
                "edit_similarity": round(self.similarity / self.holes, 3) if self.holes else 0.0,
                "passes": self.passes,
                "ms_p50": round(statistics.median(self.ms), 1) if self.ms else 0.0}


def one_line_statements(text: str) -> Iterator[list[int]]:
    """Per function of Python source `text`: the 0-based line numbers of its body's one-line
    statements (STATEMENTS) that are alone on their line."""
    spec = language_for("python")
    assert spec is not None
    tree = spec.parser().parse(text.encode())
    lines = text.split("\n")
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        stack.extend(reversed(node.named_children))
        if node.type != "function_definition":
            continue
        body = node.child_by_field_name("body")
        rows = []
        for statement in body.named_children if body is not None else []:
            row = statement.start_point[0]
            if (statement.type in STATEMENTS and row == statement.end_point[0]
                    and lines[row].strip() == statement.text.decode().strip()):
                rows.append(row)
        yield rows


def cut_holes_cases(folder: Path, count: int, seed: int = 0, cut: str = STATEMENT
                    ) -> list[HolesCase]:
    """`count` cases from the Python sources under `folder`: functions chosen in a seeded order,
    2 or 3 holes each where the function has that many statements apart, cut as `cut` says."""
    if cut not in CUTS:
        raise ValueError(f"unknown cut {cut!r} (choose from {', '.join(CUTS)})")
    candidates = []
    for path in source_files(folder):
        if path.suffix != ".py":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for rows in one_line_statements(text):
            if len(rows) >= 2:
                candidates.append((path, text, rows))
    rng = random.Random(seed)
    rng.shuffle(candidates)
    cases = []
    for path, text, rows in candidates:
        picked = _apart(rows, rng.choice((2, 3)), rng)
        lines = text.splitlines(keepends=True)
        if picked is not None and len("".join(lines[picked[0] + 1 : picked[-1]])) <= MAX_KEPT_CHARS:
            cases.append(_case(f"{path.relative_to(folder)}:{picked[0] + 1}", text, picked,
                               cut))
        if len(cases) == count:
            break
    return cases


def _apart(rows: list[int], want: int, rng: random.Random) -> list[int] | None:
    """`want` (else 2) of `rows`, none on the line after another; None when there are not two."""
    for k in (want, 2):
        for _ in range(20):
            picked = sorted(rng.sample(rows, k)) if len(rows) >= k else []
            if picked and all(b - a > 1 for a, b in zip(picked, picked[1:], strict=False)):
                return picked
    return None


def _case(case_id: str, text: str, rows: list[int], cut: str) -> HolesCase:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    texts, middles, at = [], [], 0
    for row in rows:
        a, b = starts[row], starts[row + 1]
        if cut == STATEMENT:
            line = text[a:b].rstrip("\r\n")
            a, b = a + len(line) - len(line.lstrip()), a + len(line)
        texts.append(text[at:a])
        middles.append(text[a:b] if cut == STATEMENT or text[a:b].endswith("\n")
                       else text[a:b] + "\n")
        at = b
    texts.append(text[at:])
    texts[0] = _tail_lines(texts[0], PREFIX_CHARS)
    texts[-1] = _head_lines(texts[-1], SUFFIX_CHARS)
    return HolesCase(case_id, tuple(texts), tuple(middles), cut)


def _tail_lines(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    return cut[cut.find("\n") + 1 :] if "\n" in cut else cut


def _head_lines(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return cut[: cut.rfind("\n") + 1] if "\n" in cut else cut


@dataclass(frozen=True)
class Filler:
    """How every hole is asked for: one engine, one size, one set of sampler settings."""

    backend: Backend
    settings: SamplerSettings
    hole_tokens: int
    canvas_length: int

    def joint(self, case: HolesCase) -> tuple[list[str], int]:
        k = len(case.middles)
        request = HolesRequest(case.texts, (self.hole_tokens,) * k, self.settings,
                               self.canvas_length, until=(LINE,) * k)
        last = last_draft(self.backend.holes_stream(request))
        assert last is not None
        return list(last.holes), last.step

    def sequential(self, case: HolesCase) -> tuple[list[str], int]:
        fills: list[str] = []
        passes = 0
        for k in range(len(case.middles)):
            prefix = "".join(t + case.written(f) for t, f in zip(case.texts, fills,
                                                                 strict=False))
            text, steps = self._infill(prefix + case.texts[k], "".join(case.texts[k + 1 :]))
            fills.append(text)
            passes += steps
        return fills, passes

    def independent(self, case: HolesCase) -> tuple[list[str], int]:
        fills: list[str] = []
        passes = 0
        for k in range(len(case.middles)):
            text, steps = self._infill("".join(case.texts[: k + 1]),
                                       "".join(case.texts[k + 1 :]))
            fills.append(text)
            passes += steps
        return fills, passes

    def _infill(self, prefix: str, suffix: str) -> tuple[str, int]:
        request = InfillRequest(prefix, suffix, self.hole_tokens, self.settings,
                                self.canvas_length, until=LINE)
        last = last_draft(self.backend.infill_stream(request))
        assert last is not None
        return last.text, last.step


def evaluate(filler: Filler, cases: list[HolesCase]) -> dict[str, ModeTally]:
    """Every case filled the three ways, one after another per case (so that a busy moment
    of the machine costs each way alike)."""
    tallies = {mode: ModeTally() for mode in MODES}
    for case in cases:
        for mode in MODES:
            started = time.perf_counter()
            fills, passes = getattr(filler, mode)(case)
            ms = 1000 * (time.perf_counter() - started)
            tallies[mode].add([case.written(f) for f in fills], case.middles, passes, ms)
    return tallies


def format_table(tallies: dict[str, ModeTally], cases: int) -> str:
    rows = [["mode", "holes", "exact", "all right", "edit sim", "passes", "passes/case",
             "p50 ms"]]
    for mode, tally in tallies.items():
        exact = f"{tally.holes_exact} ({_share(tally.holes_exact, tally.holes)})"
        right = f"{tally.all_right} ({_share(tally.all_right, cases)})"
        similarity = f"{tally.to_dict()['edit_similarity']:.3f}"
        rows.append([mode, str(tally.holes), exact, right, similarity, str(tally.passes),
                     f"{tally.passes / max(cases, 1):.1f}", f"{tally.to_dict()['ms_p50']:.1f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"
