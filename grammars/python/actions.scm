; Code actions: @function definitions may get their body completed or a docstring,
; @class definitions a docstring. @name names the definition, @body is what follows its colon.
(function_definition name: (identifier) @name body: (block) @body) @function
(class_definition name: (identifier) @name body: (block) @body) @class
