"""Test scaffold only: a package named sglang whose launch_server is tests/measure/hostile.py.

The sweep's deadline tests put tests/measure/hostile_site first on PYTHONPATH of the servers
they start, so `xputune launch sglang` runs a hostile server (HOSTILE_SGLANG_MODE) instead of
SGLang.
"""
