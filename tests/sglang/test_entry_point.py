"""The plugin loads through SGLang's own plugin loader, and refuses a changed SGLang in one line."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import Any

import pytest

from xputune.sglang import ENTRY_POINT_GROUP, ENTRY_POINT_NAME, ENTRY_POINT_VALUE

POOL = "sglang.srt.mem_cache.pool_host.base.HostKVCache"
UNIFIED = "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache"
TREE_CORE = "sglang.srt.mem_cache.unified_cache.unified_tree_core.UnifiedTreeCore"


def _load_through_sglang(sgl: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_PLUGINS", ENTRY_POINT_NAME)  # SGLang's whitelist: only ours
    sgl.plugins.load_plugins()


def test_entry_point_is_declared() -> None:
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == ENTRY_POINT_NAME]
    assert [ep.value for ep in found] == [ENTRY_POINT_VALUE]


def test_sglang_loader_runs_the_plugin_and_applies_its_hooks(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    original_alloc = sgl.pool_base.HostKVCache.alloc
    monkeypatch.setenv("XPUTUNE_HICACHE_LIFO", "1")
    monkeypatch.setenv("XPUTUNE_HICACHE_COUNT_ONCE", "1")
    _load_through_sglang(sgl, monkeypatch)

    hooks = plugin.installed()
    assert hooks is not None
    assert POOL + ".alloc" in hooks.hooked
    assert TREE_CORE + "._inc_hit_count_and_check" in hooks.hooked  # 0.5.20 counts twice
    patched = sgl.pool_base.HostKVCache.alloc
    assert patched is not original_alloc and patched.__wrapped__ is original_alloc


def test_nothing_is_hooked_when_no_switch_is_on(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    original_alloc = sgl.pool_base.HostKVCache.alloc
    _load_through_sglang(sgl, monkeypatch)
    assert plugin.installed() is None
    assert sgl.pool_base.HostKVCache.alloc is original_alloc


def _plugin_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The plugin's WARNING lines: features that are off, said where the cache is built."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "xputune.sglang" and r.levelno == logging.WARNING
    ]


def _startup_line(sgl: Any, runtime: Any, caplog: pytest.LogCaptureFixture) -> str:
    """Build the cache a server builds (the startup check runs on it); its startup line."""
    from tests.sglang.world import World

    with caplog.at_level(logging.INFO, logger="xputune.sglang"):
        World(sgl, runtime)
    (line,) = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("xputune cache plugin on sglang")
    ]
    return line


def test_a_changed_signature_turns_that_feature_off_in_one_line_and_the_rest_on(
    sgl: Any,
    plugin: Any,
    runtime: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    original = sgl.pool_base.HostKVCache.alloc

    def alloc(self: Any, need_size: int, pool: Any = None) -> Any:  # a future release's shape
        return original(self, need_size)

    monkeypatch.setattr(sgl.pool_base.HostKVCache, "alloc", alloc)
    monkeypatch.setenv("XPUTUNE_HICACHE_LIFO", "1")
    monkeypatch.setenv("XPUTUNE_HICACHE_KERNELS", "1")
    monkeypatch.setenv("XPUTUNE_HICACHE_HOST_BUFFER", "1")
    with caplog.at_level(logging.WARNING, logger="xputune.sglang"):
        _load_through_sglang(sgl, monkeypatch)
    assert _plugin_lines(caplog) == []  # said where the cache is built, not in every process
    assert sgl.pool_base.HostKVCache.alloc is alloc  # nothing of lifo was hooked
    hooks = plugin.installed()
    assert hooks is not None and not any(p.startswith(POOL + ".") for p in hooks.hooked)

    startup = _startup_line(sgl, runtime, caplog)
    (line,) = _plugin_lines(caplog)
    assert line.startswith("xputune cache plugin: lifo off: " + POOL + ".alloc: signature is")
    assert "(self, need_size, pool)" in line and "(self, need_size)" in line
    assert ": kernels, host_alloc on; off: lifo (" + POOL + ".alloc: signature is" in startup


def test_exit_mode_stops_at_the_first_feature_off_before_hooking_anything(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(sgl.unified_radix_cache.UnifiedRadixCache, "_evict_device_leaf")
    monkeypatch.setenv("XPUTUNE_HICACHE_LIFO", "1")
    monkeypatch.setenv("XPUTUNE_HICACHE_GHOST", "1")
    monkeypatch.setenv("XPUTUNE_HICACHE_ON_MISMATCH", "exit")
    original_alloc = sgl.pool_base.HostKVCache.alloc
    with pytest.raises(SystemExit) as exc:
        _load_through_sglang(sgl, monkeypatch)
    line = str(exc.value)
    assert "\n" not in line
    assert line.startswith(
        "xputune cache plugin refused: ghost: " + UNIFIED + "._evict_device_leaf: not found"
    )
    assert plugin.installed() is None
    assert sgl.pool_base.HostKVCache.alloc is original_alloc
    assert not sgl.hook_registry.HookRegistry._hooks


def test_a_global_the_body_no_longer_reads_turns_kernels_off(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cls = sgl.pool_mla.MLATokenToKVPoolHost

    def backup_from_device_all_layer(
        self: Any, device_pool: Any, host_indices: Any, device_indices: Any, io_backend: Any
    ) -> None:
        return None  # same signature, but the copy operator is no longer a module global

    monkeypatch.setattr(cls, "backup_from_device_all_layer", backup_from_device_all_layer)
    monkeypatch.setenv("XPUTUNE_HICACHE_KERNELS", "1")
    monkeypatch.setenv("XPUTUNE_HICACHE_LIFO", "1")
    _load_through_sglang(sgl, monkeypatch)
    (choice,) = [c for c in plugin.decide(("kernels", "lifo")) if c.shape is None]
    assert choice.feature == "kernels"
    assert choice.problem.endswith(
        "backup_from_device_all_layer: no longer calls transfer_kv_all_layer_mla, "
        "transfer_kv_all_layer_mla_lf_pf, transfer_kv_direct, transfer_kv_all_layer_direct_lf_pf, "
        "can_use_jit, so replacing that global would change nothing"
    )
    hooks = plugin.installed()
    assert hooks is not None and POOL + ".alloc" in hooks.hooked  # lifo still on


def test_an_untested_release_whose_one_target_moved_runs_every_other_feature(
    sgl: Any,
    plugin: Any,
    runtime: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fake 0.5.99: no version check refuses it; the ghost list, whose eviction hook moved,
    is off with its line, and every other feature installs."""
    import sglang

    from xputune.sglang.targets import release_note

    monkeypatch.setattr(sglang, "__version__", "0.5.99")
    monkeypatch.delattr(sgl.unified_radix_cache.UnifiedRadixCache, "_evict_device_leaf")
    for name in ("LIFO", "COUNT_ONCE", "GHOST", "KERNELS", "ASYNC", "HOST_BUFFER"):
        monkeypatch.setenv("XPUTUNE_HICACHE_" + name, "1")
    _load_through_sglang(sgl, monkeypatch)
    startup = _startup_line(sgl, runtime, caplog)
    (line,) = _plugin_lines(caplog)
    why = (
        UNIFIED + "._evict_device_leaf: not found in this sglang (type object "
        "'UnifiedRadixCache' has no attribute '_evict_device_leaf')"
    )
    assert line == "xputune cache plugin: ghost off: " + why
    assert startup.startswith("xputune cache plugin on sglang 0.5.99" + release_note("0.5.99"))
    assert ": lifo, count_once, kernels, async, host_alloc on; off: ghost (" + why + ")" in startup
    assert "untested" in release_note("0.5.99") and release_note("0.5.20") == ""


def test_every_shape_the_installed_release_has_is_found_and_the_others_say_why(
    plugin: Any,
) -> None:
    """On 0.5.20 every feature takes its 0.5.20 shape; the later shapes (count-once built
    in, the async engine's _submission) name the target that 0.5.20 lacks."""
    from xputune.sglang.targets import PluginRefused, check_targets

    for name, module in plugin.FEATURES.items():
        choice = plugin.decide((name,))[0]
        assert choice.shape is not None and choice.shape.written_for == "0.5.20", choice
        for shape in module.SHAPES:
            if shape is choice.shape:
                continue
            with pytest.raises(PluginRefused):
                check_targets(shape.targets)
