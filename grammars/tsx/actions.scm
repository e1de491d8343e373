; Code actions: @function definitions may get their body completed or a doc comment,
; @class declarations a doc comment. @body is the braces-delimited body.
(function_declaration name: (identifier) @name body: (statement_block) @body) @function
(generator_function_declaration name: (identifier) @name body: (statement_block) @body) @function
(method_definition name: (property_identifier) @name body: (statement_block) @body) @function
(class_declaration name: (type_identifier) @name body: (class_body) @body) @class
(interface_declaration name: (type_identifier) @name body: (interface_body) @body) @class
