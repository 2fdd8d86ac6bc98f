"""host/view.py's text_span cuts a text where read_text cuts it, whatever surrounds it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xputune.host.view import HostView, text_span


class OneFile(HostView):
    """A view holding one file, so read_text itself says what it keeps."""

    label = "one file"

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.data = data

    def _realpath(self, path: str) -> str:
        return path

    def _read(self, real: str) -> bytes:
        return self.data

    def _listdir(self, real: str) -> list[str]:
        return []

    def _kind(self, real: str) -> str | None:
        return "file"


EDGES = st.text(st.sampled_from(" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2028\u3000\0x"), max_size=6)


@given(head=EDGES, body=st.text(max_size=30), tail=EDGES)
def test_the_span_is_what_read_text_keeps(head: str, body: str, tail: str) -> None:
    text = head + body + tail
    start, end = text_span(text)
    assert text[start:end] == OneFile(text.encode()).read_text("/f")
