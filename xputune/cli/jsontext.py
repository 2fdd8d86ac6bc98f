"""JSON text exactly as json.dumps(data, indent=2, allow_nan=False) writes it, in less time.

Every --format json document goes out through emit_data (cli/output.py), and the probe's is
part of its start-up budget (docs: within 2x of the native lstopo). json.dumps with an indent
runs json's pure-Python encoder (its C encoder takes no indent), a generator per container:
~2 ms for a probe's 50 KB. This writes the same characters with plain recursion and the same
C string escaper json uses (ASCII output, as ensure_ascii=True): ~3 times faster. Same types in
the same order of checks (a str or int subclass such as a StrEnum is written as its value,
tuples as lists, keys that are numbers, booleans or None as their JSON text), the same errors
(ValueError for NaN and infinities, TypeError for what JSON cannot hold). Tests compare the two
on generated documents.
"""

from __future__ import annotations

try:
    from _json import encode_basestring_ascii as _string
except ImportError:  # a Python without json's accelerator
    from json.encoder import encode_basestring_ascii as _string

_INT = int.__repr__
_FLOAT = float.__repr__
_INF = float("inf")


def dumps(data: object) -> str:
    """json.dumps(data, indent=2, allow_nan=False)."""
    out: list[str] = []
    _value(data, out, "\n")
    return "".join(out)


def _value(value: object, out: list[str], newline: str) -> None:
    kind = type(value)
    if kind is str:
        out.append(_string(value))
    elif kind is dict:
        _dict(value, out, newline)  # type: ignore[arg-type]
    elif kind is list or kind is tuple:
        _list(value, out, newline)  # type: ignore[arg-type]
    elif kind is int:
        out.append(_INT(value))  # type: ignore[arg-type]
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is float:
        out.append(_float(value))  # type: ignore[arg-type]
    else:
        _subclass(value, out, newline)


def _subclass(value: object, out: list[str], newline: str) -> None:
    """What json checks with isinstance, in json's order (StrEnum, IntEnum, ...)."""
    if isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, int):
        out.append(_INT(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, list | tuple):
        _list(value, out, newline)
    elif isinstance(value, dict):
        _dict(value, out, newline)
    else:
        raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _float(value: float) -> str:
    if value != value or value == _INF or value == -_INF:
        raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
    return _FLOAT(value)


def _list(items: list | tuple, out: list[str], newline: str) -> None:
    if not items:
        out.append("[]")
        return
    inner = newline + "  "
    between = "," + inner
    out.append("[" + inner)
    first = True
    for item in items:
        if first:
            first = False
        else:
            out.append(between)
        kind = type(item)
        if kind is str:
            out.append(_string(item))
        elif kind is int:
            out.append(_INT(item))
        else:
            _value(item, out, inner)
    out.append(newline + "]")


def _dict(mapping: dict, out: list[str], newline: str) -> None:
    if not mapping:
        out.append("{}")
        return
    inner = newline + "  "
    before = "{" + inner
    between = "," + inner
    for key, item in mapping.items():
        if type(key) is not str:
            key = _key(key)
        out.append(before + _string(key) + ": ")
        before = between
        kind = type(item)
        if kind is str:
            out.append(_string(item))
        elif kind is int:
            out.append(_INT(item))
        elif item is None:
            out.append("null")
        else:
            _value(item, out, inner)
    out.append(newline + "}")


def _key(key: object) -> str:
    """A key that is not a str as json writes it: in json's order of checks."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return _INT(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")
