"""The resident engine: one process owns the model and serves every editor and batch run.

protocol (the wire format), endpoint (where it listens, who may connect), token (the token
file a TCP listener or a team's engine is reached with), daemon (the serving process),
scheduler (requests share the model step by step), client (what dg-lsp talks to), bench (the
scheduler under load).
"""
