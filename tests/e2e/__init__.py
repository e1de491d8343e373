"""End-to-end tests: real editors (Neovim, VS Code) and Ray clusters (marked e2e)."""
