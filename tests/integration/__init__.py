"""Integration tests: real servers, engines and sockets in processes of their own."""
