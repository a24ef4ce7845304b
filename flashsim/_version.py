"""The package's version, in a module of its own: the modules that record it (trace files, reports) import
it from here, not from the package root (whose ``flash_attn_func`` reaches the whole library)."""

__version__ = "0.1.0"
