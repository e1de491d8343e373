; Stub holes (dg_lsp.actions.stubs), each a hole only when alone on its line in a function's
; body: @stub a statement that stands for code to write, @stub.marked one only where its line
; carries a TODO or FIXME comment, @comment a comment (a hole when it says TODO or FIXME).
(block (expression_statement (ellipsis)) @stub)
(block (pass_statement) @stub.marked)
(comment) @comment
