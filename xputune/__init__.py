"""xputune: make tiered KV caching pay off on accelerator hosts."""

__version__ = "0.1.0"
