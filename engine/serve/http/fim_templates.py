"""Fill-in-the-middle templates that tools write into one `prompt` instead of sending a suffix.

twinny (every provider) and Continue's `provider: openai` autocomplete put the code before and
after the cursor into a code model's FIM template and send it as `prompt` alone, e.g.
`<fim_prefix>P<fim_suffix>S<fim_middle>`. A diffusion model wants P and S as they are, so the
HTTP endpoints split such a prompt back into the two (engine.serve.http.api).

A prompt is read as a template only when it holds each of one set's markers exactly once, in
the set's order, and (for sets with an end marker) ends with that marker; anything else,
markers in another order or twice included, stays plain text. Text ahead of the first marker
(the other files' context both tools may write there) goes ahead of the prefix. Nothing but
the markers is removed, so the parts keep every character the tool put in them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    """One marker set: `first` and `second` open the two parts, `end` closes the prompt ("" where
    the second part runs to the end)."""

    name: str
    first: str
    second: str
    end: str = ""
    suffix_first: bool = False  # the part after `first` is the suffix (Codestral)
    # CodeLlama's published format is "<PRE> {prefix} <SUF>{suffix} <MID>": those three spaces
    # belong to the markers.
    spaced: bool = False
    # Markers the tools put between other files' context ahead of the first marker: dropped.
    separators: tuple[str, ...] = ()

    def split(self, prompt: str) -> tuple[str, str] | None:
        """(prefix, suffix) of `prompt` written in this template, or None."""
        markers = (self.first, self.second, self.end) if self.end else (self.first, self.second)
        if any(prompt.count(marker) != 1 for marker in markers):
            return None
        if not prompt.endswith(self.end):
            return None
        lead, _, rest = prompt.partition(self.first)
        one, found, two = rest.partition(self.second)
        if not found:  # `second` comes before `first`
            return None
        two = two.removesuffix(self.end)
        if self.spaced:
            one, two = one.removeprefix(" ").removesuffix(" "), two.removesuffix(" ")
        for separator in self.separators:
            lead = lead.replace(separator, "")
        prefix, suffix = (two, one) if self.suffix_first else (one, two)
        return lead + prefix, suffix


# The sets Continue's autocomplete (core/autocomplete/templating/AutocompleteTemplate.ts) and
# twinny (src/extension/fim-templates.ts) write. Sets with an end marker come first: a prompt
# that must end with one is the stronger sign.
TEMPLATES = (
    # StarCoder, StableCode, CodeGemma's older form; Continue's default for unknown models
    Template("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
             separators=("<file_sep>", "<repo_name>")),
    # Qwen2.5-Coder, CodeGemma
    Template("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
             separators=("<|file_sep|>", "<|repo_name|>")),
    Template("codellama", "<PRE>", "<SUF>", "<MID>", spaced=True),
    Template("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    Template("codestral", "[SUFFIX]", "[PREFIX]", suffix_first=True),
)


def split_fim(prompt: str) -> tuple[str, str] | None:
    """(prefix, suffix) of a prompt written in one of TEMPLATES, or None for plain text."""
    for template in TEMPLATES:
        parts = template.split(prompt)
        if parts is not None:
            return parts
    return None
