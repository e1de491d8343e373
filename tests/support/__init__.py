"""Helpers and fixtures the tests share; no test module imports another test module."""
