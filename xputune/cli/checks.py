"""Checks on option values that typer runs as callbacks and the fast path runs itself.

An empty path or name is never what a user meant. `--root ""` used to read (and `apply`
change) the live host, because "" reads as "not given"; a script with an unset variable
(`--root "$TREE"`) must stop instead. So every option that takes a path or a name refuses ""
with one line, before the command does anything.

Free of typer and click: cli/fastpath.py calls the same function (Opt.check) on the values it
parsed, in the order typer would, so both ways into a command print the same bytes. A
callback's parameters are positional (ctx, param, value), which typer passes to an
unannotated callback; `param` needs only `opts` (click's parameters and fastpath.Opt have
it), and for an argument `metavar` or `name`.
"""

from __future__ import annotations

from typing import Any

from xputune.errors import XputuneError

# Bounds of the number options (typer's min= and max=). Each is beyond any real use, so a
# typo, a negative, nan, inf, 1e300 or 5000 digits is one usage line before anything runs
# (nan is refused too: every comparison with it is false). Watch's times are bounded in
# fleet/watch.py, which checks them itself.
#: --tp: more ranks than any machine (or cluster) serves one model with.
MAX_TP = 1024
#: --expiry of NFD labels (labels, watch), minutes: a year; 0 means they never expire.
MAX_EXPIRY_MINUTES = 525_600
#: A measured time in ms, or a cost in us per token (model): about 2.8 hours.
MAX_MS = 1e7
#: A bandwidth in GB/s (model).
MAX_GBPS = 1e5
#: A memory size in GB (an L3 pool or segment): 10 PB.
MAX_GB = 1e7
#: Tokens, or bytes per token, in a model's arithmetic (model --break-even-at, ...).
MAX_COUNT = 1e12
#: Tokens per trace block, or per page (tiers, kernels, bench).
MAX_BLOCK = 1 << 20
#: Tokens moved per layer (kernels plan, bench copy): 16M, far beyond any context.
MAX_TOKENS = 1 << 24
#: Layers of a model (kernels, bench).
MAX_LAYERS = 4096
#: Bytes of one token of one layer (kernels, bench).
MAX_ITEM = 1 << 24
#: Rounds, repeats or threads of a check or a benchmark.
MAX_RUNS = 10_000
#: A NUMA node number (the kernel's MAX_NUMNODES is at most 1024).
MAX_NODE = 1023
#: A seed (numpy's generators take 32 bits).
MAX_SEED = 2**32 - 1


def _shown(param: Any) -> str:
    """--root for an option, OUT for an argument."""
    first = param.opts[0] if param.opts else ""
    if first.startswith("-"):
        return first
    return str(getattr(param, "metavar", None) or param.name.upper()).rstrip(".")


def given(ctx: Any, param: Any, value: Any) -> Any:
    """Callback: refuse an empty value (or an empty item of a repeated one); else the value."""
    items = value if isinstance(value, (list, tuple)) else (value,)
    if any(item == "" for item in items):
        name = _shown(param)
        optional = name.startswith("-") and not getattr(param, "required", False)
        how = f"give one or leave {name} out" if optional else "give one"
        raise XputuneError(f"{name}: empty value (an unset variable?); {how}")
    return value
