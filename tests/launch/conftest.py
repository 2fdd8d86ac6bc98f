"""Shared fixtures of the launcher's tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def listener() -> Iterator[str]:
    """HOST:PORT of a socket on 127.0.0.1 that accepts connections (an L3 master that answers)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    yield f"127.0.0.1:{s.getsockname()[1]}"
    s.close()
