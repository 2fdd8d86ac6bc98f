"""typing.NamedTuple's classes, made without compiling source at import.

The topology model, the host view's helpers and the vendor records are named tuples: frozen,
compared and hashed as tuples, `_replace`d. typing.NamedTuple builds each class by compiling
source: every string annotation (this code base writes `from __future__ import annotations`)
becomes a ForwardRef compiled on the spot, and collections.namedtuple evals a `__new__`. The
probe imports some 25 such classes, ~7 ms of a ~60 ms command whose start-up is a product
target (docs: probe within 2x of the native lstopo). Declared the same way,

    from xputune.tuples import NamedTuple

    class Link(NamedTuple):
        speed: float | None
        width: int | None = None

a class is the same kind of tuple with the same behaviour: positional and keyword
construction with defaults, fields read by collections' C getters, _fields, _field_defaults,
_make, _replace, _asdict, repr, equality, hashing, pickling and __match_args__; only nothing
is compiled (~0.05 ms a class). Type checkers see typing.NamedTuple itself. Like errors.py,
this sits below every layer and imports none of them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing for it
if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    try:
        from _collections import _tuplegetter
    except ImportError:  # as collections does on a Python without it
        from operator import itemgetter

        def _tuplegetter(index, doc):
            return property(itemgetter(index), doc=doc)

    class _Named(tuple):
        """What every named tuple shares: collections.namedtuple's methods."""

        __slots__ = ()
        _fields: tuple[str, ...] = ()
        _field_defaults: dict[str, object] = {}  # noqa: RUF012 (each class sets its own)

        def __new__(cls, *args, **kwargs):
            if kwargs or len(args) != len(cls._fields):
                args = cls._arguments(args, kwargs)
            return tuple.__new__(cls, args)

        @classmethod
        def _arguments(cls, args: tuple, kwargs: dict[str, object]) -> list[object]:
            """Positional, then keyword, then default values, in field order; the TypeErrors
            a namedtuple's own __new__ raises."""
            fields = cls._fields
            if not args and len(kwargs) == len(fields):  # every field by name: no defaults
                try:
                    return [kwargs[field] for field in fields]
                except KeyError:
                    pass  # some other name instead of a field: said below
            if len(args) > len(fields):
                raise TypeError(
                    f"{cls.__name__}() takes {len(fields)} arguments but {len(args)} were given"
                )
            values = list(args)
            defaults = cls._field_defaults
            for field in fields[len(args) :]:
                if field in kwargs:
                    values.append(kwargs.pop(field))
                elif field in defaults:
                    values.append(defaults[field])
                else:
                    raise TypeError(f"{cls.__name__}() missing required argument: {field!r}")
            for name in kwargs:
                why = "got multiple values for" if name in fields else "got an unexpected keyword"
                raise TypeError(f"{cls.__name__}() {why} argument {name!r}")
            return values

        @classmethod
        def _make(cls, iterable):
            made = tuple.__new__(cls, iterable)
            if len(made) != len(cls._fields):
                raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(made)}")
            return made

        def _replace(self, /, **changes):
            made = self._make(map(changes.pop, self._fields, self))
            if changes:
                raise ValueError(f"Got unexpected field names: {list(changes)!r}")
            return made

        def _asdict(self) -> dict[str, object]:
            return dict(zip(self._fields, self, strict=True))

        def __repr__(self) -> str:
            shown = ", ".join(f"{f}={v!r}" for f, v in zip(self._fields, self, strict=True))
            return f"{self.__class__.__name__}({shown})"

        def __getnewargs__(self) -> tuple:
            return tuple(self)

    class _NamedTupleType(type):
        """`class X(NamedTuple)` makes X a plain tuple class (metaclass type, as a namedtuple
        is) with one getter per annotated field, in the order written."""

        def __new__(mcls, name, bases, namespace):
            if not bases:  # NamedTuple itself
                return super().__new__(mcls, name, bases, namespace)
            if len(bases) != 1:
                raise TypeError("a NamedTuple derives from NamedTuple alone")
            fields = tuple(namespace.get("__annotations__", {}))
            defaults: dict[str, object] = {}
            for field in fields:
                if field in namespace:
                    defaults[field] = namespace[field]
                elif defaults:
                    raise TypeError(
                        f"Non-default namedtuple field {field} cannot follow default field(s) "
                        f"{', '.join(defaults)}"
                    )
            body = {k: v for k, v in namespace.items() if k not in defaults}
            body.update(__slots__=(), _fields=fields, _field_defaults=defaults)
            body["__match_args__"] = fields
            for index, field in enumerate(fields):
                body[field] = _tuplegetter(index, f"Alias for field number {index}")
            return type(name, (_Named,), body)

    class NamedTuple(metaclass=_NamedTupleType):
        """Derive from this as from typing.NamedTuple (see the module)."""


__all__ = ["NamedTuple"]
