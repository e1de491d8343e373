"""Next-edit suggestions: the edit history, where a suggestion may go, what is checked before
it is offered, the synthetic edits the model learns from. The LSP method end to end:
tests/integration/test_next_edit.py."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from dg_lsp.document.parsed import ParsedText
from dg_lsp.measure.eval.next_edit import Outcome, Rows, format_table, judge, right_spans, summary
from dg_lsp.next_edit.history import MAX_EDITS, EditHistory
from dg_lsp.next_edit.suggest import NextEdit, region, rename_rule, spans, suggest
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.edits.prompt import LineEdit, changed_words, history_comment, new_words, next_words
from engine.edits.spans import (
    MAX_ALIKE_CHARS,
    Definition,
    Signature,
    analogous_lines,
    argument_lists,
    code_words,
    definition_region,
    python_definitions,
    signature_change,
    similar_lines,
)
from engine.edits.synthetic import (
    NOOP,
    RESPELL,
    SyntheticEdit,
    model_text,
    noop_edit,
    parameter_edit,
    synthetic_edit,
)
from engine.types import Score
from tests.support.next_edits import SOURCE
from tests.support.scripted import Scripted

PYTHON = language_for("python", "x.py")


def typed(history: EditHistory, text: str, start: int, end: int, new: str) -> str:
    """Replace text[start:end] by `new` as an editor sends it (first character replacing,
    then one at a time), recording each change."""
    changes = [(start, end, new[:1])] + [(start + i, start + i, ch)
                                         for i, ch in enumerate(new[1:], start=1)]
    for s, e, piece in changes:
        history.record(text, s, e, piece)
        text = text[:s] + piece + text[e:]
    return text


def renamed() -> tuple[str, EditHistory]:
    history = EditHistory()
    at = SOURCE.index("count")
    return typed(history, SOURCE, at, at + len("count"), "total"), history


# -- the history ------------------------------------------------------------------------------


def test_a_burst_of_typing_is_one_edit_and_an_undo_forgets_it():
    text, history = renamed()
    assert len(history.edits) == 1
    assert history.line_edits() == [LineEdit("    count = 0", "    total = 0")]
    at = text.index("total = 0")
    history.record(text, at, at + 5, "count")  # undo
    assert history.edits == []


def test_backspacing_and_whole_document_changes_are_recorded_as_what_changed():
    history = EditHistory()
    text = "x = value\n"
    for end in range(9, 6, -1):  # three backspaces at the end of "value"
        history.record(text, end - 1, end, "")
        text = text[:end - 1] + text[end:]
    assert history.line_edits() == [LineEdit("x = value", "x = va")]
    whole = EditHistory()
    whole.record(SOURCE, 0, len(SOURCE), SOURCE.replace("item.price", "item.cost"))
    (edit,) = whole.edits
    assert (edit.removed, edit.inserted) == ("price", "cost")
    assert edit.line_edit() == LineEdit("        count += item.price",
                                        "        count += item.cost")


def test_earlier_edits_move_with_the_text_and_the_history_is_bounded():
    history = EditHistory()
    text = "a = 1\nb = 2\n"
    history.record(text, 10, 11, "3")
    text = text[:10] + "3" + text[11:]
    history.record(text, 0, 0, "# hi\n")
    assert [(e.start, e.removed, e.inserted) for e in history.edits] == [
        (15, "2", "3"), (0, "", "# hi\n")]
    text = "\n".join(f"v{i} = {i}" for i in range(300))
    for i in range(300):  # hundreds of separate edits
        at = text.index(f"v{i} =")
        history.record(text, at, at + 1, "w")
        text = text[:at] + "w" + text[at + 1:]
    assert len(history.edits) == MAX_EDITS
    assert history.last.line_edit() == LineEdit("v299 = 299", "w299 = 299")


# -- where, and what is offered ---------------------------------------------------------------


PATTERN = ("def load(raw):\n"
           "    width = raw.width + 1\n"
           "    height = raw.height + 1\n"
           "    name = raw.title\n")


def test_a_line_changed_inside_points_at_the_lines_alike_and_typing_at_an_end_at_none():
    history = EditHistory()
    at = PATTERN.index("raw.width")
    text = typed(history, PATTERN, at, at, "int(")
    end = text.index("1\n") + 1
    history.record(text, end, end, ")")
    text = text[:end] + ")" + text[end:]
    assert history.line_edits() == [LineEdit("    width = raw.width + 1",
                                             "    width = int(raw.width + 1)")]
    found = spans(ParsedText(text, PYTHON), history.last, end + 1)
    assert [(text[s.start:s.end], s.kind) for s in found] == [
        ("height = raw.height + 1", "line")]
    model = Scripted("height = int(raw.height + 1)\n    name")
    edit = suggest(model, ParsedText(text, PYTHON), history.line_edits(), history.last,
                   end + 1, Settings())
    assert text[:edit.start] + edit.text + text[edit.end:] == text.replace(
        "height = raw.height + 1", "height = int(raw.height + 1)")
    # The model chose between the line changed alike (the edit's `int(` and `)` where they
    # line up) and the line as it is.
    assert model.requests[0].choices == (" height = int(raw.height + 1)\n",
                                         " height = raw.height + 1\n")
    typing = EditHistory()
    at = PATTERN.index("\n    name")
    typed(typing, PATTERN, at, at, " * 2")  # the statement is still being written
    assert spans(ParsedText(PATTERN, PYTHON), typing.last, at + 4) == []


def test_a_line_changes_the_way_the_edited_line_did_where_their_pieces_line_up():
    def alike(before: str, after: str, line: str) -> list[str]:
        return analogous_lines(LineEdit(before, after), line)

    assert alike("    x = foo(a)", "    x = int(foo(a))", "y = bar(b)") == ["y = int(bar(b))"]
    assert alike("f(a, b)", "f(a, b, strict=True)", "g(c, d)") == ["g(c, d, strict=True)"]
    # the closing bracket lines up with either of the line's last two
    assert alike("f(a, b)", "f(a, b, strict=True)", "g(c, d(e))") == [
        "g(c, d(e, strict=True))", "g(c, d(e), strict=True)"]
    assert alike("x = call(timeout=10)", "x = call(timeout=20)", "y = call(timeout=10, a=1)"
                 ) == ["y = call(timeout=20, a=1)"]
    # the replaced text is not there: nothing to change alike
    assert alike("x = call(timeout=10)", "x = call(timeout=20)", "y = call(timeout=5)") == []
    assert alike("x = f(a)", "x = f(a)\ny = 2", "z = f(b)") == []  # not one line


def test_a_line_no_alignment_finds_a_place_in_is_written_freely():
    text = "def f(raw):\n    width = raw.width + 1\n    height = raw.height * 1\n"
    at = text.index("+")
    history = EditHistory()
    history.record(text, at, at + 1, "-")
    text = text.replace("+", "-")
    found = spans(ParsedText(text, PYTHON), history.last, at)
    assert [(text[s.start:s.end], s.kind) for s in found] == [("height = raw.height * 1", "line")]
    # `+` became `-`, and the alike line has `*` there: no line is implied, the model writes
    model = Scripted("height = raw.height - 1\n")
    edit = suggest(model, ParsedText(text, PYTHON), history.line_edits(), history.last, at,
                   Settings())
    assert model.requests[0].choices is None
    assert text[:edit.start] + edit.text + text[edit.end:] == text.replace("* 1", "- 1")


def test_lines_of_data_are_not_compared_as_patterns():
    # Comparing and aligning lines is quadratic in their length (a 13k-character pair took
    # 40 s): a line over MAX_ALIKE_CHARS is no pattern, and the edit inside it implies nothing.
    row = ", ".join(f"{i}.5" for i in range(60))
    text = f"TABLE = [\n    [{row}],\n    [{row.replace('.5', '.25')}],\n]\n"
    assert len(row) > MAX_ALIKE_CHARS
    at = text.index("[0.5") + 1
    history = EditHistory()
    history.record(text, at, at, "-")  # 0.5 -> -0.5: changed inside, no word removed
    text = text[:at] + "-" + text[at:]
    assert spans(ParsedText(text, PYTHON), history.last, at) == []
    short = LineEdit("[0.5, 1.5]", "[-0.5, 1.5]")
    assert analogous_lines(short, "[0.25, 1.25]") == ["[-0.25, 1.25]"]
    assert analogous_lines(LineEdit(f"[{row}]", f"[-{row}]"), f"[{row}]") == []


def test_the_spans_are_what_the_edit_removed_in_its_definition_nearest_first():
    text, history = renamed()
    cursor = text.index("total = 0") + 5
    found = spans(ParsedText(text, PYTHON), history.last, cursor)
    line_of = [text.count("\n", 0, span.start) for span in found]
    assert [(text[span.start:span.end], span.kind) for span in found] == [
        ("count", "word"), ("count", "word")]
    assert line_of == [3, 4]  # `other`'s own `count` is another variable
    assert changed_words(history.last.line_edit()) == (["count"], ["total"])


def test_suggest_writes_the_first_span_the_model_changes_and_shows_it_the_edit():
    text, history = renamed()
    cursor = text.index("total = 0") + 5
    model = Scripted("total += 1")
    found = suggest(model, ParsedText(text, PYTHON), history.line_edits(), history.last,
                    cursor, Settings())
    at = text.index("count")
    assert (found.start, found.end, found.text) == (at, at + 5, "total")
    prefix, suffix = model.calls[0]
    assert prefix.endswith("    for item in items:\n"
                           "        # was: count = 0\n"
                           "        # now: total = 0\n"
                           "        # count -> total\n"
                           "        # count ->")
    assert suffix.startswith("\n        count += item.price\n")
    # The word is the word the edit put in, or nothing ("\n" ends the comment): not `count`,
    # which the edit removed.
    assert model.requests[0].choices == (" total\n", "\n")


def test_a_word_becomes_one_of_the_new_words_or_else_a_word_the_edits_put_in():
    assert next_words([LineEdit("    count = 0\n", "    total = 0\n")]) == ["total"]
    two = [LineEdit("a = 1\n", "b = 1\n"), LineEdit("x = f(a)\n", "x = g(b)\n")]
    assert new_words(two) == next_words(two) == ["b", "g"]
    # `args` became two words: no one-for-one replacement, so the words put in.
    grown = LineEdit("    return f(args)\n", "    return f(iterables, repeat=repeat)\n")
    assert new_words([grown]) == []
    assert next_words([grown]) == ["iterables", "repeat"]


def test_a_kept_span_an_unknown_name_and_an_unsure_model_suggest_nothing():
    text, history = renamed()
    cursor = text.index("total = 0") + 5
    doc = ParsedText(text, PYTHON)
    args = (doc, history.line_edits(), history.last, cursor)
    assert suggest(Scripted("count", "count"), *args, Settings()) is None
    assert suggest(Scripted("totl", "amount"), *args, Settings()) is None  # names not in file
    # A name the file knows, but not the word the edit put in (a piece of it, another word).
    assert suggest(Scripted("items", "item"), *args, Settings()) is None
    unsure = Scripted("total", "total", score=Score(0.2, 0.5, 1, 3))
    assert suggest(unsure, *args, Settings(min_edit_confidence=0.3)) is None
    sure = suggest(Scripted("total"), *args, Settings(min_edit_confidence=0.1))
    assert (text[sure.start:sure.end], sure.text) == ("count", "total")


def test_an_edit_that_removed_no_word_implies_nothing_and_the_rule_renames():
    history = EditHistory()
    at = SOURCE.index("    return count")
    history.record(SOURCE, at, at, "    count -= 1\n")
    text = SOURCE[:at] + "    count -= 1\n" + SOURCE[at:]
    assert suggest(Scripted(), ParsedText(text, PYTHON), history.line_edits(), history.last,
                   at, Settings()) is None
    text, history = renamed()
    rule = rename_rule(history.last, ParsedText(text, PYTHON), text.index("total = 0") + 5)
    assert (text[rule.start:rule.end], rule.text) == ("count", "total")


SIGNATURE = ("class Cart:\n"
             "    def add(self, item, count):\n"
             "        self.items.append((item, count))\n"
             "\n"
             "    def fill(self, item):\n"
             "        total = 0\n"
             "        self.add(item, 1)\n"
             "        other.add(item, 2)\n"
             "        # self.add(item, 3) in a comment\n"
             "        return self.add(item, total)\n")


def test_a_parameter_removed_points_at_the_calls_around_its_function_and_they_follow():
    history = EditHistory()
    at = SIGNATURE.index(", count)")
    history.record(SIGNATURE, at, at + len(", count"), "")
    text = SIGNATURE.replace("item, count):", "item):")
    assert signature_change(history.last.line_edit()) == Signature("add", method=True)
    doc = ParsedText(text, PYTHON)
    # The region is the class around `add`, where it is called; its own `count` is another
    # variable now, `other.add` another object's method, and the comment is no call.
    found = spans(doc, history.last, at)
    assert [(text[s.start:s.end], s.kind) for s in found] == [
        ("item, 1", "arguments"), ("item, total", "arguments")]
    model = Scripted(" item\n        other")
    edit = suggest(model, doc, history.line_edits(), history.last, at, Settings())
    assert text[:edit.start] + edit.text + text[edit.end:] == text.replace(
        "self.add(item, 1)", "self.add(item)")
    prefix, _ = model.calls[0]
    assert prefix.endswith("        # was: def add(self, item, count):\n"
                           "        # now: def add(self, item):\n"
                           "        # was: item, 1\n"
                           "        # now:")
    # The model chooses between the list without the removed parameter's argument and the
    # list as it is.
    assert model.requests[0].choices == (" item\n", " item, 1\n")


def test_training_finds_the_definitions_the_server_finds():
    """The server's region reads tree-sitter's definitions, the real edits cut for training
    Python's parser's (python_definitions): the same spans, so the same regions."""
    text = ("class A:\n    x = 1\n\n    @staticmethod\n    def f(a, b):\n        c = a\n"
            "        return 'é' + c\n\n\nasync def g():\n    # first\n    return 1\n")
    doc = ParsedText(text, PYTHON)
    found = {Definition(*doc.span(node), None if body is None else doc.span(body)[0])
             for _, node, body, _ in doc.definitions()}
    assert found == set(python_definitions(text)) and len(found) == 3
    at = text.index("c = a")
    history = EditHistory()
    history.record(text.replace("c = a", "d = a"), at, at + 1, "c")
    assert region(doc, history.last) == definition_region(text, at, at + 1, found) == (
        text.index("    def f"), text.index("\n\n\nasync") + 1)


def test_a_call_keeps_its_arguments_when_the_model_writes_another_list():
    history = EditHistory()
    at = SIGNATURE.index(", count)")
    history.record(SIGNATURE, at, at + len(", count"), "")
    text = SIGNATURE.replace("item, count):", "item):")
    # the engine could not follow the choices: "1" is not a list the header's change implies
    model = Scripted(" 1\n", " item, total\n")
    assert suggest(model, ParsedText(text, PYTHON), history.line_edits(), history.last, at,
                   Settings()) is None
    assert len(model.requests) == 2  # both calls asked, neither changed


def test_the_argument_lists_a_call_may_become_follow_the_header():
    def lists(before: str, after: str, arguments: str) -> list[str]:
        return argument_lists(LineEdit(before, after), arguments)

    # removed: the argument in its place, or the one passed by its name
    assert lists("def f(a, b, c):", "def f(a, c):", "x, y, z") == ["x, z"]
    assert lists("def f(a, b=1, c=2):", "def f(a, c=2):", "x, c=3, b=4") == ["x, c=3"]
    assert lists("    def f(self, a, b):", "    def f(self, b):", "x, y") == ["y"]
    assert lists("def f(a, b):", "def f(a):", "x") == []  # `b` was not passed
    assert lists("def f(a, *args):", "def f(a):", "x, y, z") == []
    # added: passed in its place, and by name
    assert lists("def f(a):", "def f(a, b):", "x") == ["x, b", "x, b=b"]
    assert lists("def f(a):", "def f(b, a):", "x") == ["b, x", "x, b=b"]
    assert lists("def f():", "def f(n):", "") == ["n", "n=n"]
    assert lists("def f(a, b=1):", "def f(a, b=1, c=None):", "x, b=2") == ["x, b=2, c=c"]
    assert lists("def f(a, *, k=1):", "def f(a, *, k=1, j=2):", "x") == ["x, j=j"]
    assert lists("x = f(a)", "x = f(a, b)", "a") == []  # not a header
    assert lists("def f(a):", "def f(a, b):", "x" * (MAX_ALIKE_CHARS + 1)) == []  # too long


def test_only_a_header_that_gains_or_loses_a_parameter_is_a_signature_change():
    def change(before: str, after: str) -> Signature | None:
        return signature_change(LineEdit(before, after))

    assert change("def f(a, b=(1, 2)):", "def f(a, b=(1, 2), c=None):") == Signature("f", False)
    assert change("def f(a: Dict[str, int], b) -> Tuple[int, int]:",
                  "def f(a: Dict[str, int]) -> Tuple[int, int]:") == Signature("f", False)
    assert change("def f(a, b):", "def f(a, c):") is None  # a parameter renamed
    assert change("def f(a, b):", "def g(a):") is None
    assert change("x = f(a, b)", "x = f(a)") is None
    assert change("def f(a,", "def f(a, b,") is None  # a header over several lines


# -- synthetic edits --------------------------------------------------------------------------


def test_synthetic_edits_are_consistent_with_what_the_model_is_shown():
    root = Path(__file__).resolve().parents[2]
    text = root.joinpath("dg_lsp", "actions", "rewrite.py").read_text()
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(300):
        kind = ("rename", "literal", "keep", "pattern", NOOP)[len(seen) % 5]
        case = noop_edit(text, rng) if kind == NOOP else synthetic_edit(text, rng, kind)
        if case is None:
            continue
        seen.add(kind)
        after = (case.original[:case.change_at] + case.inserted
                 + case.original[case.change_at + len(case.removed):])
        assert after == case.text
        if kind == NOOP:
            assert case.removed == ""
            continue
        if kind == "pattern":
            line = case.text[case.text.rfind("\n", 0, case.start) + 1:case.end]
            assert case.expected != line.strip() and similar_lines(case.edit.before, line)
        else:
            assert case.text[case.start:case.end] == (case.expected if kind == "keep"
                                                      else case.removed)
        prefix, middle, suffix = model_text(case)
        line = case.text.rfind("\n", 0, case.start) + 1
        indent = re.match(r"[ \t]*", case.text[line:]).group()
        note = history_comment([case.edit], "#", indent)
        span = case.text[case.start:case.end]
        ask = (f"{indent}# was: {span}\n{indent}# now:" if kind == "pattern"
               else f"{indent}# {span} ->")
        assert prefix == case.text[:line] + note + ask
        assert (middle, suffix) == (" " + case.expected, "\n" + case.text[line:])
    assert seen == {"rename", "literal", "keep", "pattern", NOOP}


def test_a_parameter_edit_changes_a_header_and_a_call_near_it_alike():
    outcomes = set()
    for seed in range(60):
        case = parameter_edit(SIGNATURE, np.random.default_rng(seed))
        if case is None:
            continue
        assert case.original[:case.change_at] + case.inserted + case.original[
            case.change_at + len(case.removed):] == case.text
        assert case.text[case.start:case.end] in ("item, 1", "item, total")
        assert case.edit.before == "    def add(self, item, count):"
        outcomes.add((case.edit.after, case.expected))
    # Removed: the argument in the parameter's place goes. Added: a variable where the call is
    # (`total`, not `item`, which the call passes already) is passed by position.
    assert outcomes == {
        ("    def add(self, count):", "1"),
        ("    def add(self, item):", "item"),
        ("    def add(self, count):", "total"),
        ("    def add(self, item, count, total):", "item, 1, total"),
    }
    # After a parameter with a default, a new one has a default too and is passed by name.
    keyword = parameter_edit("def f(a, b=1):\n    return 1\n\n\nx, y = 2, 3\nf(x, b=3)\n",
                             np.random.default_rng(0))
    assert (keyword.edit.after, keyword.expected) == ("def f(a, b=1, y=None):",
                                                      "x, b=3, y=y")


def test_synthetic_renames_change_code_never_prose_builtins_or_dunders():
    text = ('def scale(values, factor):\n'
            '    """Multiply values by factor; values is not changed."""\n'
            '    # factor may be negative\n'
            '    result = [v * factor for v in values]\n'
            '    print(len(result), "values")\n'
            '    return result\n')
    code = code_words(text)
    assert (text.index("factor"), text.index("factor") + 6) in code
    assert all(not (text.index('"""') <= s < text.index("# factor") + 9) for s, _ in code
               if text[s:s + 6] in ("values", "factor"))
    rng = np.random.default_rng(0)
    renamed = set()
    for _ in range(200):
        case = synthetic_edit(text, rng, "rename")
        if case is not None:
            renamed.add(case.removed)
            assert case.change_at == text.index(case.removed)  # the first occurrence
    assert renamed == {"values", "factor", "result"}  # `v` is on one line only
    assert code_words("def broken(:\n    '''unterminated\n") is None


def test_respelled_renames_are_renames_whose_new_name_does_not_extend_the_old():
    text = ("def total(iterable, max_size):\n"
            "    items = list(iterable)[:max_size]\n"
            "    return sum(items) + max_size\n")
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(300):
        case = synthetic_edit(text, rng, RESPELL)
        if case is None:
            continue
        assert case.kind == "rename"  # judged as one; only the new name differs
        assert case.expected == case.inserted != case.removed
        assert not case.expected.startswith(case.removed)
        assert case.text[case.start:case.end] == case.removed
        seen.add(case.removed)
    assert seen == {"iterable", "max_size", "items"}


def test_the_eval_counts_only_the_occurrences_in_the_edits_region_as_right():
    original = ("class Zone:\n"
                "    def utcoffset(self, dt):\n"
                "        return dt.offset\n"
                "\n"
                "    def dst(self, dt):\n"
                "        return dt.dst\n")
    at = original.index("dt)")
    text = original[:at] + "when" + original[at + 2:]
    used = text.index("dt.offset")
    case = SyntheticEdit("rename", original, at, "dt", "when", text,
                         LineEdit("    def utcoffset(self, dt):", "    def utcoffset(self, when):"),
                         used, used + 2, "when")
    # `dt` in dst() is dst's own parameter: renaming utcoffset's implies nothing there
    assert right_spans(case) == {(used, used + 2)}
    assert judge(case, NextEdit(used, used + 2, "when", None, 0)).exact
    other = text.index("dt.dst")
    wrong = judge(case, NextEdit(other, other + 2, "when", None, 0))
    assert (wrong.suggested, wrong.located, wrong.exact) == (True, False, False)
    # the same rename with its only other use in the next method: not a case at all
    lone = original.replace("return dt.offset", "return 0")
    at_lone = lone.index("dt)")
    text_lone = lone[:at_lone] + "when" + lone[at_lone + 2:]
    far = text_lone.index("dt.dst")
    assert right_spans(SyntheticEdit("rename", lone, at_lone, "dt", "when", text_lone,
                                     case.edit, far, far + 2, "when")) == set()


def test_synthetic_renames_follow_a_name_only_inside_its_own_function():
    text = ("class Zone:\n"
            "    def utcoffset(self, dt):\n"
            "        return dt.offset\n"
            "\n"
            "    def dst(self, dt):\n"
            "        return 0\n")
    rng = np.random.default_rng(0)
    targets = set()
    for _ in range(200):
        case = synthetic_edit(text, rng, "rename")
        if case is not None and case.removed == "dt":
            targets.add(case.text.count("\n", 0, case.start))
    assert targets == {2}  # utcoffset's own `dt`, never dst's parameter


def test_the_eval_table_gives_each_exact_rate_its_95_percent_interval():
    rows = Rows()
    for i in range(30):
        rows.add("rename", Outcome(True, True, i < 25, 0.05))
    for _ in range(30):
        rows.add("noop", Outcome(False, False, False, 0.01))
    table = summary("default (resident engine)", rows)
    # Wilson's interval for 25 of 30: 0.664-0.927
    assert [round(v, 3) for v in table[0]["exact95"]] == [0.664, 0.927]
    assert table[1]["exact95"] is None  # noop has no right text
    lines = format_table(table).split("\n")
    assert lines[0].split()[3:6] == ["exact", "exact", "95%"]
    assert lines[2].split()[3:6] == ["rename", "30", "83%"]
    assert lines[2].split()[6] == "66-93%"
    assert lines[3].split()[6] == "-"

