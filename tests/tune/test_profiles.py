"""Profiles: shipped ones load, include chains merge later-wins, errors name file and key."""

from __future__ import annotations

import os
import textwrap

import pytest

from xputune.tune import profiles
from xputune.tune.errors import ProfileError


def _write(folder, name: str, text: str) -> str:
    path = os.path.join(str(folder), f"{name}.yaml")
    with open(path, "w") as fh:
        fh.write(textwrap.dedent(text))
    return path


def test_every_shipped_profile_loads():
    names = profiles.profile_names()
    assert {"generic", "hygon-p800", "kunlunxin-p800", "nvidia-hopper"} <= set(names)
    for name in names:
        loaded = profiles.load(name)
        assert loaded.description
        assert loaded.knobs


def test_profiles_are_found_through_the_package_symlink():
    folder = profiles.builtin_dir()
    assert os.path.isfile(os.path.join(folder, "generic.yaml"))


def test_hygon_chain_later_wins_field_by_field():
    hygon = profiles.load("hygon-p800")
    assert hygon.chain == ("generic", "kunlunxin-p800", "hygon-p800")
    assert hygon.knobs["pcie.ido"].value is True  # kunlunxin-p800 says when-shared-uplinks
    assert hygon.knobs["pcie.ido"].severity == "critical"
    assert hygon.knobs["thp.enabled"].value == "madvise"  # from generic
    assert hygon.knobs["thp.enabled"].severity == "critical"  # from kunlunxin-p800
    assert hygon.knobs["thp.enabled"].accept == ("always",)
    assert hygon.knobs["numa.balancing"].value == 0  # YAML `off` is a boolean; parsed to 0
    assert hygon.platform_registers == ()  # off unless a profile names them


def test_generic_leaves_pcie_ordering_alone():
    assert "pcie.ido" not in profiles.load("generic").knobs


def test_null_drops_an_inherited_knob(tmp_path):
    path = _write(
        tmp_path,
        "mine",
        """
        include: generic
        knobs:
          shm.huge: null
    """,
    )
    assert "shm.huge" not in profiles.load(path).knobs


def test_include_list_applies_in_order_then_self(tmp_path):
    _write(tmp_path, "a", "knobs: {thp.enabled: never, thp.defrag: never}\n")
    _write(tmp_path, "b", "knobs: {thp.enabled: always}\n")
    path = _write(
        tmp_path,
        "c",
        f"""
        include: [{tmp_path}/a.yaml, {tmp_path}/b.yaml]
        knobs: {{thp.defrag: madvise}}
    """,
    )
    loaded = profiles.load(path)
    assert loaded.knobs["thp.enabled"].value == "always"
    assert loaded.knobs["thp.defrag"].value == "madvise"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "knobs: {thp.enabled: sometimes}\n",
            "knobs.thp.enabled.value: 'sometimes' is not a valid",
        ),
        ("knobs: {thp.enabeld: madvise}\n", "knobs.thp.enabeld: unknown knob"),
        ("knobs: {thp.enabled: {value: madvise, severity: fatal}}\n", "severity: 'fatal'"),
        ("knobs: {thp.enabled: {value: madvise, colour: red}}\n", "unknown key 'colour'"),
        ("knobs: {pcie.ido: maybe}\n", "knobs.pcie.ido.value: 'maybe'"),
        ("knobs: {numa.balancing: sideways}\n", "not a numa.balancing value"),
        ("knobs: {shm.huge: huge}\n", "not a huge= mode"),
        ("colour: red\n", "unknown key 'colour'"),
        ("schema_version: 2\n", "schema_version 2"),
        ("include: nosuchprofile\n", "no profile named 'nosuchprofile'"),
        ("knobs: [1, 2]\n", "knobs: expected a mapping"),
        ("match: {cpu_vendor: 3}\n", "match.cpu_vendor"),
        ("match: {card_ids: ['10de']}\n", "not vendor:device hex"),
        ("match: {min_cards: -1}\n", "min_cards"),
        ("knobs: {thp.enabled: {accept: [always]}}\n", "no value"),
        ("knobs: {thp.enabled: madvise\n", "not valid YAML"),
        (
            "platform_registers: [{name: x, vendor: 0x1d94, offset: 0x101, width: 16, mask: 1, "
            "value: 1}]\n",
            "not aligned",
        ),
        (
            "platform_registers: [{name: x, vendor: 0x1d94, offset: 0x100, mask: 1, value: 2}]\n",
            "must lie inside mask",
        ),
        (
            "platform_registers: [{name: x, vendor: 0x1d94, offset: 0x100, width: 12, mask: 1, "
            "value: 1}]\n",
            "width: 12",
        ),
        ("platform_registers: [{name: x, offset: 0x100, mask: 1, value: 1}]\n", "missing 'vendor'"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path, text, message):
    path = _write(tmp_path, "bad", text)
    with pytest.raises(ProfileError) as err:
        profiles.load(path)
    assert message in str(err.value)
    assert str(err.value).startswith(path) or "nosuchprofile" in str(err.value)


def test_include_loop_is_reported(tmp_path):
    _write(tmp_path, "x", f"include: {tmp_path}/y.yaml\n")
    path = _write(tmp_path, "y", f"include: {tmp_path}/x.yaml\n")
    with pytest.raises(ProfileError, match="include loop"):
        profiles.load(path)


def test_platform_register_is_parsed_with_width_in_bytes(tmp_path):
    path = _write(
        tmp_path,
        "reg",
        """
        include: hygon-p800
        platform_registers:
          - {name: rc-ido, vendor: 0x1d94, device: 0x14ab, offset: 0x110, width: 32,
             mask: 0x00010000, value: 0x00010000}
    """,
    )
    [reg] = profiles.load(path).platform_registers
    assert (reg["vendor"], reg["device"], reg["offset"], reg["width"]) == (0x1D94, 0x14AB, 0x110, 4)


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(ProfileError, match=r"known: .*generic"):
        profiles.load("nope")


def test_a_cached_profile_is_the_one_parsed_and_a_loose_entry_is_refused(
    tmp_path, monkeypatch, capsys
):
    """The cache (host/usercache.py) gives back exactly the YAML's parse, and only from an
    entry nobody else could have written (planted ones: tests/host/test_usercache_attacks.py).
    """
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("XPUTUNE_CACHE", raising=False)
    fresh = profiles.load("hygon-p800")
    entry = tmp_path / "cache" / "profiles" / profiles._cache_entry(profiles.locate("hygon-p800"))
    assert oct(entry.stat().st_mode & 0o777) == "0o600"
    assert profiles.load("hygon-p800") == fresh  # from the cache
    entry.chmod(0o666)
    capsys.readouterr()
    assert profiles.load("hygon-p800") == fresh  # parsed again, entry rewritten
    assert "writable by others (mode 0666)" in capsys.readouterr().err
    assert oct(entry.stat().st_mode & 0o777) == "0o600"
