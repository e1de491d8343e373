; @unit: statements and definitions; context windows are cut at their first and last lines.
(module (_) @unit)
(block (_) @unit)

; @body: nodes holding one statement per line (a cursor inside them is not "inside brackets").
(block) @body

(comment) @comment
