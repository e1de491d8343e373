; What a rewrite must keep unless asked (dg_lsp/signature.py): each @function's or @class's
; @name, and the @parameter names of a function's @parameters, in order.
(function_definition name: (identifier) @name parameters: (parameters) @parameters) @function
(class_definition name: (identifier) @name) @class

(parameters
  [(identifier) @parameter
   (default_parameter name: (identifier) @parameter)
   (typed_parameter . (identifier) @parameter)
   (typed_default_parameter name: (identifier) @parameter)
   (list_splat_pattern (identifier) @parameter)
   (dictionary_splat_pattern (identifier) @parameter)
   (typed_parameter (list_splat_pattern (identifier) @parameter))
   (typed_parameter (dictionary_splat_pattern (identifier) @parameter))]) @parameters
