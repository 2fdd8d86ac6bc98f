"""Option values without pydantic: the plain cases converted here, everything else by typer.

typer (0.29) checks every option value with a pydantic TypeAdapter. Importing pydantic and
building those adapters costs about 85 ms per run, more than the whole fast-path probe, and
DESIGN wants plan, check and launch within 2x of the probe. Nearly every value
xputune reads is a plain string, a whole number, a decimal, a flag, an enum member or a path,
so those are converted here the way typer's adapters convert them; a value that is anything
else, or that does not convert cleanly (a typo, out of range, another spelling), goes to
typer's own coercion, which then accepts it or raises its usual error. Only the cost changes:
tests/cli/test_startup.py compares both on every option of every command.

install() hooks typer's per-parameter factory when this typer has one; with any other typer it
does nothing and typer works as it ships.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_origin

_INT = re.compile(r"0|[1-9][0-9]{0,17}")
_DECIMAL = re.compile(r"(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?")


class _Typer(Exception):
    """This value is for typer's own coercion."""


def install() -> None:
    """Make typer build plain runtime parameters; a no-op where typer has no such hook."""
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_choice, coerce_cli_path
        from typer.core import _TyperParameter
    except ImportError:
        return
    if not callable(getattr(_TyperParameter, "get_runtime_param", None)):
        return
    if getattr(_TyperParameter.get_runtime_param, "plain", False):
        return

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        descriptor: Any

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return plain(self.annotation, self.parameter_info, value, param, ctx)
            except Exception:
                real = build_runtime_param(self.descriptor)
                return real._coerce_value(value, param=param, ctx=ctx)

    def plain(annotation: Any, info: Any, value: Any, param: Any, ctx: Any) -> Any:
        if info.parser is not None:
            raise _Typer
        if get_origin(annotation) is list:
            if not isinstance(value, (list, tuple)):
                raise _Typer
            (item,) = annotation.__args__
            return [plain(item, info, v, param, ctx) for v in value]
        if not isinstance(annotation, type):
            raise _Typer
        if issubclass(annotation, Enum):
            return coerce_cli_choice(
                value, choices=list(annotation), case_sensitive=info.case_sensitive, ctx=ctx
            )
        if annotation is int or annotation is float:
            return _number(annotation, info, value)
        if annotation is bool and type(value) is bool:
            return value
        if annotation is str and type(value) is str:
            return value
        if issubclass(annotation, Path) and info.path_type is None and type(value) is str:
            return coerce_cli_path(
                annotation(value), info, path_type=annotation, param=param, ctx=ctx
            )
        raise _Typer

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            desc = self.type_descriptor
            if desc.file_annotation is None:
                self._runtime_param = PlainRuntimeParam(desc.parameter_info, desc.annotation, desc)
            else:
                self._runtime_param = build_runtime_param(desc)
        return self._runtime_param

    get_runtime_param.plain = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param


def _number(kind: type, info: Any, value: Any) -> int | float:
    """A whole number or decimal written plainly, inside the option's bounds; else typer."""
    if info.clamp:
        raise _Typer
    written = type(value) is str and (_INT if kind is int else _DECIMAL).fullmatch(value)
    if not (written or type(value) is kind or (kind is float and type(value) is int)):
        raise _Typer
    number = kind(value)
    if info.min is not None and not number >= info.min:
        raise _Typer
    if info.max is not None and not number <= info.max:
        raise _Typer
    return number
