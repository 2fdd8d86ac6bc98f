"""engine.parse_selection_args reads back what Selection.persist_args writes.

The watch and `xputune status` rebuild the selection an apply journaled from its flags alone,
so every selection apply can make must survive the round trip: same profile, same knobs, same
values, and the same flags again (a fixed point), --force included where the flags override a
critical setting. (It found one that did not: `apply --no-ido` without --profile wrote
a boot unit `apply --profile hygon-p800 --no-ido ...` that refused to run without --force.)
"""

from __future__ import annotations

import functools

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.fixtures.trees import host_tree
from xputune.errors import XputuneError
from xputune.host.view import DirView
from xputune.tune import engine
from xputune.tune.knobs import KNOBS

VALUES = {
    "pcie.ido": st.booleans(),
    "thp.enabled": st.sampled_from(["always", "madvise", "never"]),
    "shm.huge": st.sampled_from(["never", "always", "within_size", "advise"]),
    "numa.balancing": st.sampled_from(["on", "off"]),
}


@functools.cache
def seed_topology():
    return engine.discover(DirView(str(host_tree("h3c-hygon-p800"))))


@st.composite
def selections(draw):
    profile = draw(st.sampled_from([None, "hygon-p800", "kunlunxin-p800", "generic"]))
    overrides = {k: draw(v) for k, v in VALUES.items() if draw(st.booleans())}
    knobs = list(KNOBS)
    only = draw(st.none() | st.lists(st.sampled_from(knobs), unique=True, max_size=3))
    skip = draw(st.lists(st.sampled_from(knobs), unique=True, max_size=3))
    return profile, overrides, only or None, skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(selections())
def test_every_selection_survives_its_flags(drawn) -> None:
    profile, overrides, only, skip = drawn
    topology = seed_topology()
    try:
        selection = engine.select(topology, profile, overrides, only, skip)
    except XputuneError:
        assume(False)  # a contradiction apply refuses (--only and --skip naming one knob...)
    args = selection.persist_args()
    again = engine.parse_selection_args(args).select(topology)
    assert again.profile.name == selection.profile.name
    assert again.wants == selection.wants
    assert again.persist_args() == args
    assert ("--force" in args) == bool(again.overridden)


@given(st.lists(st.text(max_size=12), max_size=6))
def test_any_words_are_read_or_refused_in_one_line(words) -> None:
    try:
        parsed = engine.parse_selection_args(words)
    except XputuneError as exc:
        assert "\n" not in str(exc).replace("\\n", "")
        return
    assert parsed.profile and words.count("--profile") >= 1


def test_a_boot_unit_for_knob_flags_alone_runs_without_asking_for_force(mini) -> None:
    """`apply --no-ido --persist`: the unit names the recommended profile and turns its
    critical IDO off, so it carries --force, or it would refuse at every boot."""
    from tests.tune import helpers
    from xputune.tune import persist

    view = DirView(mini)
    helpers.apply(view, profile=None, overrides={"pcie.ido": False}, persist_unit=True)
    with open(mini + persist.UNIT_PATH) as fh:
        args = persist.installed_args(fh.read())
    assert args is not None and "--force" in args and "--no-ido" in args
    selection = engine.parse_selection_args(args).select(engine.discover(view))
    assert list(selection.wants) == ["pcie.ido"] and selection.wants["pcie.ido"].value is False
