"""recommend's scoring: every stated rule must hold; more specific rules score higher."""

from __future__ import annotations

import pytest

from xputune.host.view import DirView
from xputune.tune import engine, profiles, recommend
from xputune.tune.profiles import Match


@pytest.fixture
def topology(mini):
    return engine.discover(DirView(mini))


@pytest.mark.parametrize(
    ("match", "eligible"),
    [
        (Match(), True),
        (Match(cpu_vendor=("HygonGenuine",)), True),
        (Match(cpu_vendor=("GenuineIntel",)), False),
        (Match(card_ids=((0x1D22, 0x3688),)), True),
        (Match(card_ids=((0x10DE, 0x2330),)), False),
        (Match(card_model=("P800",), min_cards=2), True),
        (Match(card_model=("P800",), min_cards=3), False),
    ],
)
def test_every_rule_must_hold(topology, match, eligible):
    assert recommend.score(match, topology)[0] is eligible


def test_a_failed_rule_is_named(topology):
    _, _, reasons = recommend.score(Match(min_cards=8), topology)
    assert reasons == ("no: 2 cards (needs 8+)",)


def test_more_specific_profiles_win(topology):
    ranked = recommend.rank(profiles.load_all(), topology)
    names = [c.profile.name for c in ranked if c.eligible]
    assert names[:3] == ["hygon-p800", "kunlunxin-p800", "generic"]


def test_without_a_fitting_profile_there_is_no_recommendation(topology):
    only_nvidia = [profiles.load("nvidia-hopper")]
    assert recommend.recommend(only_nvidia, topology) is None
