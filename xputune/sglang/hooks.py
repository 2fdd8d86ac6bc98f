"""Registration through SGLang's HookRegistry, plus the few patches it cannot express.

HookRegistry wraps functions and methods. Two things it cannot do are done here directly and
recorded: replacing a module global that a function looks up at call time (the kvcacheio copy
operators in the MLA host pool module) and changing a module-level defaultdict
(ALLOC_MEMORY_FUNCS). Every patch point is remembered so tests can put SGLang back as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xputune.sglang.targets import PluginRefused, resolve

_MISSING = object()


class Hooks:
    """The plugin's view of SGLang's HookRegistry for one install()."""

    def __init__(self, registry: Any = None) -> None:
        if registry is None:
            from sglang.srt.plugins.hook_registry import HookRegistry

            registry = HookRegistry
        self.registry = registry
        self.hooked: dict[str, Any] = {}  # target path -> the original, to prove it was replaced
        self.direct: list[tuple[str, Any, Any, Any]] = []  # (attr|item, owner, name, previous)

    def _register(self, path: str, fn: Callable[..., Any], kind: str) -> None:
        from sglang.srt.plugins.hook_registry import HookType

        self.hooked.setdefault(path, resolve(path))
        self.registry.register(path, fn, HookType[kind])

    def around(self, path: str, fn: Callable[..., Any]) -> None:
        """fn(original, *args, **kwargs) runs instead of the target and may call it."""
        self._register(path, fn, "AROUND")

    def after(self, path: str, fn: Callable[..., Any]) -> None:
        """fn(result, *args, **kwargs) runs after the target; a non-None return replaces result."""
        self._register(path, fn, "AFTER")

    def before(self, path: str, fn: Callable[..., Any]) -> None:
        """fn(*args, **kwargs) runs first; it may return (args, kwargs) to change them."""
        self._register(path, fn, "BEFORE")

    def set_global(self, owner: Any, name: str, value: Any) -> None:
        """Replace a module global (or any object attribute) directly."""
        previous = getattr(owner, name, _MISSING)
        setattr(owner, name, value)
        self.direct.append(("attr", owner, name, previous))

    def set_item(self, mapping: dict[Any, Any], key: Any, value: Any) -> None:
        """Replace one entry of a module-level mapping (ALLOC_MEMORY_FUNCS) directly."""
        previous = mapping.get(key, _MISSING)  # .get never runs a defaultdict's factory
        mapping[key] = value
        self.direct.append(("item", mapping, key, previous))

    def apply(self) -> None:
        """Apply every registered hook now and prove each target was really replaced."""
        self.registry.apply_hooks()
        for path, original in self.hooked.items():
            if resolve(path) is original:
                raise PluginRefused(f"{path}: the hook registry did not apply the plugin's hook")

    def undo_direct(self) -> None:
        """Put the direct patches back (tests; HookRegistry hooks have no undo)."""
        for kind, owner, name, previous in reversed(self.direct):
            if kind == "item":
                if previous is _MISSING:
                    owner.pop(name, None)
                else:
                    owner[name] = previous
            elif previous is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)
        self.direct.clear()
