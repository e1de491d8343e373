; Stub holes (dg_lsp.actions.stubs), each a hole only when alone on its line in a function's
; body: @stub a statement that stands for code to write, @comment a comment (a hole when it
; says TODO or FIXME).
(block (macro_invocation macro: (identifier) @_macro
  (#any-of? @_macro "todo" "unimplemented")) @stub)
(block (expression_statement (macro_invocation macro: (identifier) @_macro
  (#any-of? @_macro "todo" "unimplemented"))) @stub)
(line_comment) @comment
(block_comment) @comment
