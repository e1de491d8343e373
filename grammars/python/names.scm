; Names a suggestion uses and binds (dg_lsp/names.py). A @use that is neither a @bind nor a
; @skip must be known to the file: defined or imported anywhere in it, or a builtin.
; Strings and comments are tokens of their own, so words in them are never identifiers here;
; an f-string's interpolations are code and are checked.

(identifier) @use

; not a name being used: the field after a dot, a keyword argument's or pattern's name,
; the module paths of imports
(attribute attribute: (identifier) @skip)
(keyword_argument name: (identifier) @skip)
(keyword_pattern . (identifier) @skip)
(import_statement name: (dotted_name (identifier) @skip))
(aliased_import name: (dotted_name (identifier) @skip))
(import_from_statement module_name: (dotted_name (identifier) @skip))
(relative_import (dotted_name (identifier) @skip))

; names the suggestion binds: assignment, for, with, except, comprehension, walrus and match
; targets, parameters, definitions, imports, global/nonlocal declarations
(assignment left: (identifier) @bind)
(pattern_list (identifier) @bind)
(tuple_pattern (identifier) @bind)
(list_pattern (identifier) @bind)
(list_splat_pattern (identifier) @bind)
(dictionary_splat_pattern (identifier) @bind)
(for_statement left: (identifier) @bind)
(for_in_clause left: (identifier) @bind)
(as_pattern_target (identifier) @bind)
(as_pattern_target (tuple (identifier) @bind))
(named_expression name: (identifier) @bind)
(function_definition name: (identifier) @bind)
(class_definition name: (identifier) @bind)
(parameters (identifier) @bind)
(lambda_parameters (identifier) @bind)
(default_parameter name: (identifier) @bind)
(typed_parameter . (identifier) @bind)
(typed_default_parameter name: (identifier) @bind)
(import_statement name: (dotted_name . (identifier) @bind))
(aliased_import alias: (identifier) @bind)
(import_from_statement name: (dotted_name (identifier) @bind))
(global_statement (identifier) @bind)
(nonlocal_statement (identifier) @bind)
(case_pattern (dotted_name . (identifier) @bind .))
(keyword_pattern (dotted_name . (identifier) @bind .))
(splat_pattern (identifier) @bind)
