"""Edits as a model reads them: the next-edit prompt format, spans and synthetic edits
(synthetic), and real edits between released versions (real)."""
