"""Every kind of change by name, for code that meets kinds it did not plan.

A journal replayed by `xputune rollback` names kinds that another process planned (a knob's
register bits, a boot unit's file), so its lookup must know them all, whichever modules this
process happened to load. steps.py holds the table and the modules that define accessors fill
it when imported: this module imports every one of them. It sits above them all, so no module
that registers an accessor imports it back (steps.py used to import them from inside
accessor(), a circle through knobs/ and persist.py).
"""

from __future__ import annotations

from xputune.tune import knobs, persist
from xputune.tune.steps import Accessor, registered

#: The modules whose accessors a journal may name (imported for what they register).
DEFINERS = (knobs, persist)


def accessor(kind: str) -> Accessor:
    """The accessor of `kind`; JournalError for a kind no module defines."""
    return registered(kind)
