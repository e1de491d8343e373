"""The resident engine: one process owns the model and serves every editor and batch run.

Three doors, each translating its transport only: socket/ (the local socket and --listen TCP:
the wire protocol, the daemon that serves it, the endpoint it listens at, the client dg-lsp
talks to), http/ (OpenAI's and llama.cpp's completion APIs for other tools: --http), team/ (a
team's engine on Ray Serve, its front door and its client). Every door's requests go through
admit (parsed into the engine's typed request, bounded, authorised, scheduled) onto the
scheduler (requests share the model step by step), held to limits (what one request may ask);
token (the token file a TCP listener, the HTTP port or a team's engine is reached with),
command (`dg-engine serve`), bench and bench_dtypes (the scheduler under load, the dtypes).
"""
