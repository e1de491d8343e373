"""A hole that must hold one of a few texts, or nothing (InfillRequest.choices).

A next edit's word is one of the new words the user's edits put in (`count -> total`: `total`),
or the span stays as it is. Restricting the hole to those words' tokens is not enough: the
bundled model, unsure of a rare word split into pieces (` field` + `Names`), commits the first
piece and then a stop token. Here the model decides, left to right, only where the choices
part (the first token, mostly), each time between the tokens that keep some choice possible;
a choice once begun is written to its end (engine.decode.denoise: the positions on which the choices
still possible agree are committed at once, a word in a pass or two).

A choice's tokens are followed by stop tokens (the hole's end); the empty choice, stop tokens
only, is always possible. Positions are hole positions, so this suits a hole of fixed length
(the masked family without DreamOn's growing and shrinking) and the AR family, whose hole grows
one token at a time; the others keep the union of the choices' tokens (`Choices.tokens`), and
the caller checks what they wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Choices:
    sequences: tuple[tuple[int, ...], ...]  # each choice's token ids; () is nothing
    ends: frozenset[int]  # the tokens that end a hole (stop, pad)

    @classmethod
    def of(cls, sequences: Iterable[Sequence[int]], ends: Iterable[int]) -> Choices:
        unique = dict.fromkeys(tuple(s) for s in sequences)
        unique.setdefault(())
        return cls(tuple(unique), frozenset(ends))

    @property
    def tokens(self) -> frozenset[int]:
        """Every token some choice holds at some position, with the end tokens."""
        return frozenset(t for s in self.sequences for t in s) | self.ends

    def fits(self, sequence: tuple[int, ...], position: int, token: int) -> bool:
        """Whether `token` at hole `position` agrees with `sequence`."""
        if position < len(sequence):
            return sequence[position] == token
        return token in self.ends

    def live(self, committed: dict[int, int]) -> list[tuple[int, ...]]:
        """The choices that agree with every committed {position: token}."""
        return [s for s in self.sequences
                if all(self.fits(s, p, t) for p, t in committed.items())]

    def allowed_at(self, live: Sequence[tuple[int, ...]], position: int) -> frozenset[int]:
        """The tokens `position` may take while one of `live` is still written."""
        allowed = {s[position] for s in live if position < len(s)}
        if any(position >= len(s) for s in live):
            allowed |= self.ends
        return frozenset(allowed)
