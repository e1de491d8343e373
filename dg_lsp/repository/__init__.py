"""The repository as context: an index of a workspace's source files (dg_lsp.repository.index)
and what a completion reads of it (alike lines of other files, the definitions of names the
cursor's line uses, the windows most like the code at the cursor).

The files are git's list where the root is a git repository, otherwise a walk that honours
.gitignore (dg_lsp.repository.walk); binary, generated and oversized files are left out. What
each file defines and imports comes from tree-sitter (dg_lsp.repository.symbols). Nothing of
it leaves the machine except in the requests to the engine the user chose.
"""
