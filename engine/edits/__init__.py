"""Edits as a model reads them: the next-edit prompt format (prompt), where an edit implies a
change and the region around it (spans), synthetic edits (synthetic), and real edits between
released versions (real)."""
