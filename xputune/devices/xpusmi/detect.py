"""Which form a text is, from its lines, so `smi --input` takes any of them from either vendor."""

from __future__ import annotations

import re

from xputune.devices.xpusmi import csvform, query, table, topo
from xputune.devices.xpusmi.model import SmiParseError
from xputune.devices.xpusmi.values import shown

_LIST_LINE = re.compile(r"^(?:XPU|GPU)\s+[0-9]+\s*:", re.ASCII)
_KEY_VALUE = re.compile(r"^\S[^:]*\s:\s")
_BUS_LIKE = re.compile(r"^[0-9A-Fa-f]+(?::[0-9A-Fa-f]+)+\.[0-9A-Fa-f]+$", re.ASCII)
_SCAN = 400  # lines looked at: every form shows itself well before that


def detect(text: str) -> str:
    """One of model.FORMS' keys; SmiParseError when the text is none of them."""
    lines = [line for line in text.splitlines()[:_SCAN] if line.strip()]
    if not lines:
        raise SmiParseError(None, "empty input")
    first = lines[0].strip()
    if first.startswith("<"):
        return "xml"
    if any(table.TITLE.search(line) for line in lines[:10]):
        return "table"
    if csvform.is_header(first):
        return "csv"
    if any(query.CARD_HEADER.match(line) or query.is_banner(line) for line in lines):
        return "query"
    if any(topo.TITLES.search(line) for line in lines[:3]) or any(
        line.strip() in ("Legend:", "NIC Legend:") for line in lines
    ):
        return "topo"
    if _BUS_LIKE.match(first.split()[0]) and '"' in first:
        return "monitor"
    if _LIST_LINE.match(first):
        return "list"
    if _KEY_VALUE.match(first):
        return "query"
    if csvform.looks_headless(lines[:50]):
        raise csvform.refuse_headless()
    raise SmiParseError(
        None,
        "not a known form: expected the output of xpu-smi or nvidia-smi (default table, -L, -q, "
        f"-q -x, -m, topo -m or --query-gpu --format=csv) (first line {shown(first)})",
    )
