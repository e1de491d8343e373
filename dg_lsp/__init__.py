"""dg-lsp: a language server for text-diffusion code models."""

__version__ = "0.1.0"
