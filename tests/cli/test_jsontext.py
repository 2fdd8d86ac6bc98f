"""cli/jsontext.py writes what json.dumps(data, indent=2, allow_nan=False) writes, or raises
the same kind of error, on generated documents and on the probe's own."""

from __future__ import annotations

import enum
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xputune.cli import jsontext


class Kind(enum.StrEnum):
    card = "card"


class Level(enum.IntEnum):
    high = 3


def _reference(data: object) -> object:
    try:
        return json.dumps(data, indent=2, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return type(exc)


def _ours(data: object) -> object:
    try:
        return jsontext.dumps(data)
    except (TypeError, ValueError) as exc:
        return type(exc)


SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text()
    | st.sampled_from([Kind.card, Level.high, 1e300, -0.0, 5e-324, "\x1b[31m\u202e\U0001f600"])
)  # fmt: skip
KEYS = st.text() | st.integers() | st.floats() | st.booleans() | st.none() | st.just(Kind.card)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.lists(inner, max_size=5).map(tuple)
    | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=40,
)  # fmt: skip


@given(data=DOCUMENTS)
def test_the_same_text_or_the_same_error_as_json(data: object) -> None:
    assert _ours(data) == _reference(data)


@pytest.mark.parametrize(
    "data",
    [{"a": math.nan}, [math.inf], {"x": {"y": [1, -math.inf]}}, {math.nan: 1}],
    ids=["nan", "inf", "deep", "key"],
)
def test_numbers_that_are_not_finite_are_a_value_error(data: object) -> None:
    assert _ours(data) is ValueError is _reference(data)


@pytest.mark.parametrize(
    "data", [{"a": {1, 2}}, [object()], {(1, 2): "tuple key"}, b"bytes"], ids=str
)
def test_what_json_cannot_hold_is_a_type_error(data: object) -> None:
    assert _ours(data) is TypeError is _reference(data)


@pytest.mark.parametrize("example", ["h3c-hygon-p800", "nvidia-hgx-h100"])
def test_the_probe_documents_come_out_as_json_wrote_them(example: str) -> None:
    from xputune.devices.enrich import vendor_info
    from xputune.host import open_host
    from xputune.topology.discover import discover
    from xputune.topology.serialize import to_dict

    host = open_host(None, example)
    topo = discover(host)
    doc = to_dict(topo, vendor_info(topo, live=False).as_json())
    assert jsontext.dumps(doc) == json.dumps(doc, indent=2, allow_nan=False)
