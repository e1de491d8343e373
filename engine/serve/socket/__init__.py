"""The resident engine's own door: the local socket (and --listen TCP), its wire protocol, the
daemon that serves it and the client that speaks it."""
