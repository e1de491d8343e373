"""The LSP layer: the app (server), its state, one thin module per request kind, the documents
and trees it keeps, the engine it hosts. Imports the features; no feature imports it."""
