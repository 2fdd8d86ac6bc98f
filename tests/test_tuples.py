"""xputune.tuples.NamedTuple behaves as typing.NamedTuple does, for every way the code uses one.

Each case declares the same class both ways and compares what comes out: construction from
any mix of positional, keyword and default values (or the TypeError), _replace (or the
ValueError), _make, _asdict, repr, equality, hashing, pickling, copying and pattern matching.
"""

from __future__ import annotations

import copy
import pickle
import types
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xputune import tuples


def _pair(n_fields: int, n_defaults: int) -> tuple[type, type]:
    """The same class, n_fields fields of which the last n_defaults have defaults, both ways."""
    fields = [f"f{i}" for i in range(n_fields)]

    def body(namespace: dict[str, object]) -> None:
        namespace["__module__"] = __name__
        namespace["__annotations__"] = dict.fromkeys(fields, "int | None")
        namespace.update({f: -i for i, f in enumerate(fields) if i >= n_fields - n_defaults})

    ref = types.new_class("Rec", (typing.NamedTuple,), exec_body=body)
    return ref, types.new_class("Rec", (tuples.NamedTuple,), exec_body=body)


def _outcome(call: typing.Callable[[], object]) -> object:
    try:
        value = call()
    except (TypeError, ValueError) as exc:
        return type(exc)
    return (tuple(value), repr(value)) if isinstance(value, tuple) else value


SHAPES = st.integers(0, 5).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n)))
CALLS = st.tuples(st.integers(0, 7), st.lists(st.sampled_from(["f0", "f1", "f2", "f4", "g"])))


@given(shape=SHAPES, call=CALLS)
def test_construction_gives_the_same_tuple_or_the_same_error(shape, call) -> None:
    ref, ours = _pair(*shape)
    n_args, names = call
    args = list(range(100, 100 + n_args))
    kwargs = {name: i for i, name in enumerate(names)}
    assert _outcome(lambda: ours(*args, **kwargs)) == _outcome(lambda: ref(*args, **kwargs))


@given(shape=SHAPES, changes=st.dictionaries(st.sampled_from(["f0", "f2", "g"]), st.integers()))
def test_replace_make_and_asdict_match(shape, changes) -> None:
    ref, ours = _pair(*shape)
    values = list(range(shape[0]))
    a, b = ref(*values), ours(*values)
    assert _outcome(lambda: b._replace(**changes)) == _outcome(lambda: a._replace(**changes))
    assert b._asdict() == a._asdict()
    assert (ours._fields, ours._field_defaults) == (ref._fields, ref._field_defaults)
    assert ours.__match_args__ == ref.__match_args__
    longer = [*values, 1]
    assert _outcome(lambda: ours._make(longer)) == _outcome(lambda: ref._make(longer))
    assert ours._make(values) == b and type(ours._make(values)) is ours


def test_a_class_keeps_its_methods_docs_and_annotations() -> None:
    class Link(tuples.NamedTuple):
        """A link."""

        speed: float | None
        width: int | None = None

        @property
        def fast(self) -> bool:
            return (self.speed or 0) > 8

        def describe(self) -> str:
            return f"{self.speed} x{self.width}"

    link = Link(16.0, width=4)
    assert (link.speed, link.width, link.fast, link.describe()) == (16.0, 4, True, "16.0 x4")
    assert Link.__doc__ == "A link." and Link.__qualname__.endswith("Link")
    assert Link.__annotations__ == {"speed": "float | None", "width": "int | None"}
    assert link == (16.0, 4) and hash(link) == hash((16.0, 4)) and isinstance(link, tuple)
    assert repr(link) == "Link(speed=16.0, width=4)"
    with pytest.raises(AttributeError):
        link.speed = 1.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        link.other = 1  # type: ignore[attr-defined]
    match link:
        case Link(speed, width):
            assert (speed, width) == (16.0, 4)


def test_pickling_and_copying_give_equal_tuples_of_the_class() -> None:
    from xputune.topology.model import HugePages, NumaNode

    node = NumaNode(0, (0, 1), 1 << 30, None, (10,), (HugePages(2048, 4, 4),))
    for again in (pickle.loads(pickle.dumps(node)), copy.copy(node), copy.deepcopy(node)):
        assert again == node and type(again) is NumaNode
        assert type(again.hugepages[0]) is HugePages


def test_a_default_before_a_plain_field_is_refused_as_typing_refuses_it() -> None:
    with pytest.raises(TypeError, match="cannot follow default"):

        class Bad(tuples.NamedTuple):
            a: int = 0
            b: int
