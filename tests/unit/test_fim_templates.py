"""FIM templates in a prompt split back into the prefix and suffix the tool put there, exactly;
anything else stays plain text. The prompts are the strings Continue's autocomplete
(@continuedev/core 1.1.0, autocomplete/templating/AutocompleteTemplate.ts) and twinny
(3.23.31, src/extension/fim-templates.ts) build."""

from __future__ import annotations

import pytest

from engine.serve.http.fim_templates import split_fim

P = "def area(r):\n    return  "  # ends in spaces: none may be lost
S = " * r\n\nprint(area(2))\n"
HEADER = "\n# Language: Python (python) \n# File uri: file:///w/a.py (python) \n"  # twinny's


@pytest.mark.parametrize("prompt,prefix,suffix", [
    # Continue's stableCode template (its default), and twinny's starcoder/stable-code one
    (f"<fim_prefix>{P}<fim_suffix>{S}<fim_middle>", P, S),
    (f"<fim_prefix>\n{HEADER}{P}<fim_suffix>{S}<fim_middle>", f"\n{HEADER}{P}", S),
    # StarCoder2's other files, ahead of the prefix: the separators dropped
    (f"<file_sep>a = 1\n<file_sep><fim_prefix>{P}<fim_suffix>{S}<fim_middle>", f"a = 1\n{P}", S),
    # Qwen2.5-Coder / CodeGemma (Continue), twinny's codeqwen with and without file context
    (f"<|fim_prefix|>{P}<|fim_suffix|>{S}<|fim_middle|>", P, S),
    (f"<|file_sep|># ctx\n\n<|file_sep|>{HEADER}<|fim_prefix|>{P}<|fim_suffix|>{S}"
     "<|fim_middle|>", f"# ctx\n\n{HEADER}{P}", S),
    # CodeLlama as published (Continue), and twinny's (a space and a newline after <PRE>, a
    # space after <SUF> that is the suffix's)
    (f"<PRE> {P} <SUF>{S} <MID>", P, S),
    (f"<PRE> \n{HEADER}{P} <SUF> {S} <MID>", f"\n{HEADER}{P}", f" {S}"),
    (f"<PRE>/* ctx */ \n{P} <SUF> {S} <MID>", f"/* ctx */ \n{P}", f" {S}"),
    # DeepSeek Coder (Continue; twinny's adds a newline ahead of the prefix)
    (f"<｜fim▁begin｜>{P}<｜fim▁hole｜>{S}<｜fim▁end｜>", P, S),
    (f"<｜fim▁begin｜>\n{P}<｜fim▁hole｜>{S}<｜fim▁end｜>", f"\n{P}", S),
    # Codestral: suffix first, the prefix runs to the end (twinny puts context ahead)
    (f"[SUFFIX]{S}[PREFIX]{P}", P, S),
    (f"[SUFFIX]{S}[PREFIX]+++++ a.py\n{P}", f"+++++ a.py\n{P}", S),
    (f"# ctx\n\n[SUFFIX]{S}[PREFIX]{HEADER}{P}", f"# ctx\n\n{HEADER}{P}", S),
    # empty parts
    ("<fim_prefix><fim_suffix><fim_middle>", "", ""),
    ("<PRE>  <SUF> <MID>", "", ""),
])
def test_a_template_splits_into_its_prefix_and_suffix(prompt, prefix, suffix):
    assert split_fim(prompt) == (prefix, suffix)


@pytest.mark.parametrize("prompt", [
    "def area(r):\n    return ",  # no template
    "",
    f"<fim_suffix>{S}<fim_prefix>{P}<fim_middle>",  # markers out of order
    f"<fim_prefix>{P}<fim_middle>{S}<fim_suffix>",
    f"[PREFIX]{P}[SUFFIX]{S}",
    f"<fim_prefix>{P}<fim_suffix>{S}<fim_middle>\n",  # not ending with the end marker
    f"<fim_prefix>{P}<fim_suffix>{S}",  # no end marker
    f"<fim_prefix>{P}<fim_prefix><fim_suffix>{S}<fim_middle>",  # a marker twice
    f"<fim_prefix>{P}<fim_suffix>{S}<fim_suffix><fim_middle>",
    f"<fim_prefix>{P}<|fim_suffix|>{S}<fim_middle>",  # markers of two sets
    f"<PRE> {P} <SUF>{S}",
    f"<｜fim▁begin｜>{P}<｜fim▁end｜>",
])
def test_anything_else_stays_plain_text(prompt):
    assert split_fim(prompt) is None
