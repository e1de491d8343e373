"""The rules that decide what a masked step commits besides the sampler, hole by hole.

The sampler (engine.decode.samplers) proposes a token for every masked position and picks the ones
to commit; these rules add to or replace its picks, and edit the hole after it. They are plain
functions of a Sequence (engine.decode.sequence) and its `Rules`; a request's holes are spans
of the canvas hole (`Rules.holes`: one span for one hole), and each rule applies to each span
alone:

- the stop run: the trailing run of stop tokens is committed at once, but for its first
  STOP_RUN_MARGIN positions, once any of it is committed;
- min_tokens: no stop token in a hole's first positions;
- early stop: everything after the first committed stop token becomes pad;
- at least one position a step per hole still masked;
- a later hole's first token completes the text healed from the code before it;
- a hole's unit end (several holes, engine.decode.holes): once its committed text holds it, the
  rest of the hole is padded;
- DreamOn's edits: a committed expand token becomes two masks, a committed stop is deleted;
- a hole of choices (engine.text.choices) commits where the choices still possible agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Texts

import torch
from torch import Tensor

from engine.decode.samplers import allowed_mask
from engine.decode.sequence import Rules, Sequence
from engine.text.canvas import completion_text
from engine.text.choices import Choices
from engine.text.stops import completion_ids
from engine.text.units import LINE, unit_ended

# The model's first guess at where a hole ends is often a token or two short: the positions
# just before the stop run stay masked and are denoised as usual (without the margin the
# stop run cut completions short; docs/performance.md).
STOP_RUN_MARGIN = 2


def follow_choices(choices: Choices, hole: Sequence, logits: Tensor, lo: int) -> None:
    """Forbid at the first masked position lo (the logits' first row) the tokens no choice
    that agrees with the committed ones holds there."""
    live = choices.live(hole.committed_tokens())
    kept = allowed_mask(choices.allowed_at(live, lo), logits.shape[1], logits.device)
    logits[0, ~kept] = float("-inf")  # type: ignore[operator]


def choose(choices: Choices, hole: Sequence, pad_id: int | None, lo: int, proposed: Tensor,
           confidence: Tensor) -> Tensor:
    """What a step commits in a hole of choices: the first masked position lo, as the
    sampler proposes it, then every position on which the choices still possible agree,
    as they hold it (with no confidence of the model's: it did not choose them). The
    model decides where the choices part, left to right; a choice once begun is written
    to its end at once. Committing the surest positions first instead let a stop token
    the model guessed at the second position (a one-token word) rule out a longer word
    it had begun."""
    committed = hole.committed_tokens()
    committed[lo] = int(proposed[lo])
    live = choices.live(committed)
    commit = torch.zeros_like(hole.committed)
    commit[lo] = True
    for position in hole.masked().nonzero().flatten().tolist():
        held = {s[position] if position < len(s) else pad_id for s in live}
        if position != lo and len(held) == 1:
            proposed[position] = held.pop()
            confidence[position] = math.nan
            commit[position] = True
    return commit


def stop_run(region: Tensor, committed: Tensor, commit: Tensor, proposed: Tensor,
              stop_ids: Tensor) -> Tensor:
    """Positions to commit with this step's: the trailing run of stop tokens (committed or
    proposed) when any of it is committed now or before, but for its first STOP_RUN_MARGIN
    positions; else none."""
    tokens = torch.where(committed, region, proposed)
    is_stop = torch.isin(tokens, stop_ids)
    run = int(torch.cumprod(is_stop.flip(0).int(), 0).sum())
    extra = torch.zeros_like(commit)
    if run and bool((commit | committed)[-run:].any()):
        settled = run - STOP_RUN_MARGIN
        if settled > 0:
            extra[-settled:] = ~committed[-settled:]
    return extra


def stop_early_in(region: Tensor, committed: Tensor, stop_ids: set[int], pad_id: int | None
                  ) -> bool:
    """Pad everything after the first committed stop token of the positions `region` of a
    hole (views, edited in place), with their `committed` flags; whether there is one."""
    is_stop = torch.zeros_like(committed)
    for t in stop_ids:
        is_stop |= region == t
    is_stop &= committed
    if not bool(is_stop.any()):
        return False
    first = int(is_stop.nonzero()[0])
    if pad_id is not None:
        region[first + 1 :] = pad_id
    committed[first + 1 :] = True
    return True


def edit_dreamon(
    hole: Sequence, expand_id: int, stop_ids: set[int], max_length: int, mask_id: int
) -> tuple[bool, bool]:
    """DreamOn: committed expand → two masks (while there is room), committed stop → deleted.

    Returns (whether the hole changed length, whether a slot was deleted).
    """
    tokens, committed = hole.hole_tokens(), hole.committed.tolist()
    confidence = hole.confidence.tolist()
    room = max_length - hole.x.shape[0]
    new_tokens: list[int] = []
    new_committed: list[bool] = []
    new_confidence: list[float] = []
    deleted = False
    for tok, done, conf in zip(tokens, committed, confidence, strict=True):
        if done and tok == expand_id and room > 0:
            new_tokens += [mask_id, mask_id]
            new_committed += [False, False]
            new_confidence += [math.nan, math.nan]
            room -= 1
        elif done and tok == expand_id:
            new_tokens.append(mask_id)  # no room left: the slot stays a single mask
            new_committed.append(False)
            new_confidence.append(math.nan)
        elif done and tok in stop_ids:
            deleted = True
        else:
            new_tokens.append(tok)
            new_committed.append(done)
            new_confidence.append(conf)
    if new_tokens == tokens and new_committed == committed:
        return False, deleted
    hole.set_hole(new_tokens, new_committed, new_confidence)
    return len(new_tokens) != len(tokens), deleted


def stop_runs(region: Tensor, committed: Tensor, commit: Tensor, proposed: Tensor,
              stop_ids: Tensor, holes: list[tuple[int, int]]) -> Tensor:
    """`stop_run` of each hole: the stop runs committed with this step's picks."""
    extra = torch.zeros_like(commit)
    for a, b in holes:
        extra[a:b] = stop_run(region[a:b], committed[a:b], commit[a:b], proposed[a:b], stop_ids)
    return extra


def no_early_stop(logits: Tensor, lo: int, rules: Rules) -> None:
    """No stop token in each hole's first `min_tokens` positions (logits from lo on)."""
    for a, b in rules.holes:
        first, end = max(a, lo), min(b, a + rules.settings.min_tokens)
        if end > first:
            logits[first - lo : end - lo, rules.stop_list] = float("-inf")


def heal_later_holes(logits: Tensor, lo: int, seq: Sequence, rules: Rules) -> None:
    """A later hole's first token, while masked, completes the text healed from the code
    before it (the first hole's is the canvas's, one of engine.decode.constraints)."""
    for k, first in rules.firsts.items():
        row = rules.holes[k][0] - lo
        if 0 <= row < logits.shape[0] and not bool(seq.committed[row + lo]):
            logits[row, ~first] = float("-inf")


def one_per_hole(commit: Tensor, confidence: Tensor, masked: Tensor,
                 holes: list[tuple[int, int]]) -> Tensor:
    """`commit` with the most confident masked position of every hole it leaves out: each
    hole advances at least as fast as it would alone, so the holes together take about the
    passes of the longest. One hole needs nothing: the sampler commits one of its masked
    range already."""
    if len(holes) > 1:
        for a, b in holes:
            if bool(masked[a:b].any()) and not bool(commit[a:b].any()):
                scores = confidence[a:b].masked_fill(~masked[a:b], -1.0)
                commit[a + int(scores.argmax())] = True
    return commit


def end_holes(seq: Sequence, rules: Rules) -> None:
    """After a commit: each hole padded after its first committed stop token, or after its
    unit end (its rest is cut away by the client: no pass is spent on it); `seq.stopped`
    once every hole has ended."""
    region = seq.x[seq.start : seq.hole_end]
    pad = rules.pad_id if rules.pad_id is not None else rules.stop_list[0]
    for k, (a, b) in enumerate(rules.holes):
        if stop_early_in(region[a:b], seq.committed[a:b], rules.stop_ids, rules.pad_id):
            seq.ended[k] = True
        if bool(seq.committed[a:b].all()) or rules.units[k] is None:
            continue
        if unit_ended(hole_text(seq, rules, k), rules.units[k]):
            rest = ~seq.committed[a:b]
        elif rules.units[k].kind == LINE and (p := first_newline(seq, rules, k)) is not None:
            # A line ends at its first newline: whatever the positions before it become,
            # those after it are cut away.
            rest = ~seq.committed[a:b]
            rest[: p + 1] = False
            if not bool(rest.any()):
                continue
        else:
            continue
        region[a:b][rest] = pad
        seq.committed[a:b] |= rest
        seq.ended[k] = True
    seq.stopped = all(seq.ended)


def first_newline(seq: Sequence, rules: Rules, k: int) -> int | None:
    """The first position of hole k committed to a token that holds a newline (the healed
    text of its first token aside: that newline is the line before the hole's)."""
    a, b = rules.holes[k]
    tokens = seq.x[seq.start + a : seq.start + b].tolist()
    for p, (token, done) in enumerate(zip(tokens, seq.committed[a:b].tolist(), strict=True)):
        if not done or token in rules.stop_ids:
            continue
        text = rules.tokenizer.decode([token])
        if p == 0 and rules.heals[k]:
            text = text[len(rules.heals[k]) :]
        if "\n" in text:
            return p
    return None


def hole_ids(seq: Sequence, rules: Rules, k: int) -> list[int]:
    """Hole k's committed tokens up to its first gap or stop token."""
    a, b = rules.holes[k]
    committed = seq.committed[a:b].tolist()
    settled_to = next((i for i, c in enumerate(committed) if not c), len(committed))
    return completion_ids(seq.x[seq.start + a : seq.start + a + settled_to].tolist(),
                          rules.stop_ids)


def hole_text(seq: Sequence, rules: Rules, k: int) -> str:
    """Hole k's committed text up to its first gap or stop token, as the user sees it."""
    text = rules.tokenizer.decode(hole_ids(seq, rules, k))
    if k == 0:
        return completion_text(rules.canvas, text)
    if rules.heals[k] and text.startswith(rules.heals[k]):
        text = text[len(rules.heals[k]) :]
    return text.replace("\n", "\r\n") if rules.canvas.crlf else text


def spliced(texts: Texts[str], holes: Texts[str]) -> str:
    """The code between the prefix and the suffix with `holes` in place (as many as given)."""
    parts = [holes[0]] if holes else []
    for kept, text in zip(texts[1:-1], holes[1:], strict=False):
        parts += [kept, text]
    return "".join(parts)
