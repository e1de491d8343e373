"""tree-sitter helpers every feature shares: the grammar and queries of a language, the names
a text uses and binds."""
