"""The port a sweep (and the server lane) gives SGLang stays out of the kernel's ephemeral range.

A TP-2 engine's own sockets take ephemeral ports during its start-up; one landing on the port
picked for it made the server fail its bind and exit 3, its warm-up request answered by the
stranger (seen in CI). The range comes from the host's own setting, read through the view.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from xputune.host import open_host
from xputune.measure.ports import DEFAULT_EPHEMERAL_START, ephemeral_start, server_port


def _host(tmp_path: Path, text: str | None) -> Path:
    folder = tmp_path / "proc" / "sys" / "net" / "ipv4"
    folder.mkdir(parents=True)
    if text is not None:
        (folder / "ip_local_port_range").write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("32768\t60999\n", 32768),  # Linux's default, as the kernel prints it
        ("40000\t65000\n", 40000),
        ("15000 65000\n", 15000),
        ("", DEFAULT_EPHEMERAL_START),
        ("garbage\n", DEFAULT_EPHEMERAL_START),
        ("80000\t90000\n", DEFAULT_EPHEMERAL_START),  # no such port
        (None, DEFAULT_EPHEMERAL_START),  # a kernel without the setting (no IPv4)
    ],
)
def test_the_ephemeral_range_is_read_from_the_host(tmp_path: Path, text, start) -> None:
    assert ephemeral_start(open_host(str(_host(tmp_path, text)))) == start


def test_the_port_is_below_the_range_and_free(tmp_path: Path) -> None:
    view = open_host(str(_host(tmp_path, "32768\t60999\n")))
    ports = {server_port("127.0.0.1", view) for _ in range(20)}
    assert all(20000 <= p < 32768 for p in ports), ports
    assert len(ports) > 1  # drawn, so two sweeps started together rarely meet
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when handed out


def test_with_no_room_below_the_kernel_chooses(tmp_path: Path) -> None:
    view = open_host(str(_host(tmp_path, "1500\t65000\n")))  # everything is ephemeral
    port = server_port("127.0.0.1", view)
    assert 1500 <= port <= 65000
