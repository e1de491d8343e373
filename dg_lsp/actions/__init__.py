"""Code actions, knowing nothing of LSP: where each applies (targets), the rewrite through the
engine, and the checks on what a rewrite changed (signature)."""
