; Code actions: @function items may get their body completed or a doc comment,
; @class items (structs, enums, traits) a doc comment. @body is the braces-delimited body.
(function_item name: (identifier) @name body: (block) @body) @function
(struct_item name: (type_identifier) @name) @class
(enum_item name: (type_identifier) @name) @class
(trait_item name: (type_identifier) @name) @class
