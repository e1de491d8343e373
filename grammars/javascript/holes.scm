; Stub holes (dg_lsp.actions.stubs): @comment a comment, a hole when it says TODO or FIXME
; and stands alone on its line in a function's body.
(comment) @comment
