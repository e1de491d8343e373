; @unit: statements and definitions; context windows are cut at their first and last lines.
(program (_) @unit)
(statement_block (_) @unit)
(class_body (_) @unit)
(switch_body (_) @unit)

; @body: nodes holding one statement per line (a cursor inside them is not "inside brackets").
[(statement_block) (class_body) (switch_body)] @body

(comment) @comment
