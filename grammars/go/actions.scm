; Code actions: @function declarations may get their body completed or a doc comment,
; @class type declarations a doc comment. @body is the braces-delimited body.
(function_declaration name: (identifier) @name body: (block) @body) @function
(method_declaration name: (field_identifier) @name body: (block) @body) @function
(type_declaration (type_spec name: (type_identifier) @name)) @class
