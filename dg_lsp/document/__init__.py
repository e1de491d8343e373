"""The document layer the features share: the parsed document and the rules every
feature applies before it offers text (dg_lsp.document.accept, dg_lsp.document.gate)."""
