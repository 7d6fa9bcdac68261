"""warmstart: record an application's cold launch once, prefetch it on every later launch."""

__version__ = "0.1.0"
