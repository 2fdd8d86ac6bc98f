"""Test scaffold only: a package named sglang whose launch_server is tests/measure/fakesglang.py.

The sweep tests put tests/measure/fake_site first on PYTHONPATH of the servers they start, so
`xputune launch sglang` runs this instead of SGLang: the sweep's whole path (launcher command
line, process group, readiness, replay, stop) without a model.
"""
