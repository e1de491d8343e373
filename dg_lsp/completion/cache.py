"""Suggestions that stay valid while the user types into them.

After suggesting T at a cursor with text P before it and S after it, a request whose text
before the cursor is P + t (t a prefix of T) and after it still S is answered with the rest of
T, without calling the engine. Keys compare a bounded tail of P and head of S: text further
away never reached the model's canvas either.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from dg_lsp.completion.postprocess import Suggestion

KEY_CHARS = 4000


@dataclass
class _Entry:
    before: str  # the last KEY_CHARS characters before the cursor
    after: str  # the first KEY_CHARS characters after it
    suggestion: Suggestion


class CompletionCache:
    def __init__(self, capacity: int = 100) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, int], _Entry] = OrderedDict()
        self._next_id = 0

    def put(self, uri: str, text: str, offset: int, suggestion: Suggestion) -> None:
        entry = _Entry(text[max(0, offset - KEY_CHARS):offset],
                       text[offset:offset + KEY_CHARS], suggestion)
        self._entries[(uri, self._next_id)] = entry
        self._next_id += 1
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get(self, uri: str, text: str, offset: int) -> Suggestion | None:
        """The rest of a cached suggestion the user is typing through, if any."""
        after = text[offset:offset + KEY_CHARS]
        for key in reversed(self._entries):
            if key[0] != uri:
                continue
            entry = self._entries[key]
            full = entry.suggestion.text
            if entry.after != after:
                continue
            # typed = how far into the suggestion the cursor is
            for typed in range(0, len(full)):
                start = offset - typed
                if start < 0:
                    break
                if (text[start:offset] == full[:typed]
                        and text[max(0, start - KEY_CHARS):start] == entry.before):
                    self._entries.move_to_end(key)
                    return Suggestion(full[typed:], entry.suggestion.replace)
        return None

    def clear(self, uri: str | None = None) -> None:
        for key in [k for k in self._entries if uri is None or k[0] == uri]:
            del self._entries[key]
