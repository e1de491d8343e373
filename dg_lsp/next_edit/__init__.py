"""Next-edit suggestions, knowing nothing of LSP: each document's edit history and the
edit it implies."""
