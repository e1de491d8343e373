; @unit: statements and definitions; context windows are cut at their first and last lines.
(source_file (_) @unit)
(block (_) @unit)
(declaration_list (_) @unit)

; @body: nodes holding one item per line (a cursor inside them is not "inside brackets").
[(block) (declaration_list) (field_declaration_list) (match_block) (enum_variant_list)] @body

[(line_comment) (block_comment)] @comment
