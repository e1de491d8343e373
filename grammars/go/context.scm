; @unit: statements and definitions; context windows are cut at their first and last lines.
(source_file (_) @unit)
(statement_list (_) @unit)

; @body: nodes holding one item per line (a cursor inside them is not "inside brackets").
[(block) (field_declaration_list) (interface_type)] @body

(comment) @comment
