"""The plugin loads through SGLang's own plugin loader, and refuses a changed SGLang in one line."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import Any

import pytest

from xputune.sglang import ENTRY_POINT_GROUP, ENTRY_POINT_NAME, ENTRY_POINT_VALUE

POOL = "sglang.srt.mem_cache.pool_host.base.HostKVCache"
HIRADIX = "sglang.srt.mem_cache.hiradix_cache.HiRadixCache"


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
    assert HIRADIX + "._inc_hit_count" in hooks.hooked
    patched = sgl.pool_base.HostKVCache.alloc
    assert patched is not original_alloc and patched.__wrapped__ is original_alloc


def test_nothing_is_hooked_when_no_switch_is_on(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    original_alloc = sgl.pool_base.HostKVCache.alloc
    _load_through_sglang(sgl, monkeypatch)
    assert plugin.installed() is None
    assert sgl.pool_base.HostKVCache.alloc is original_alloc


def test_a_changed_signature_is_refused_with_one_line_naming_it(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def alloc(self: Any, need_size: int, pool: Any = None) -> Any:  # a future release's shape
        return None

    monkeypatch.setattr(sgl.pool_base.HostKVCache, "alloc", alloc)
    monkeypatch.setenv("XPUTUNE_HICACHE_LIFO", "1")
    with caplog.at_level(logging.ERROR, logger="xputune.sglang"), pytest.raises(SystemExit) as exc:
        _load_through_sglang(sgl, monkeypatch)

    line = str(exc.value)
    assert "\n" not in line
    assert line.startswith("xputune cache plugin refused: " + POOL + ".alloc: signature is")
    assert "(self, need_size, pool)" in line and "(self, need_size)" in line
    assert [r.getMessage() for r in caplog.records if r.name == "xputune.sglang"] == [line]
    assert sgl.pool_base.HostKVCache.alloc is alloc  # refused before anything was hooked
    assert not sgl.hook_registry.HookRegistry._hooks
    assert plugin.installed() is None


def test_a_patched_away_method_is_refused(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(sgl.hiradix_cache.HiRadixCache, "_evict_regular")
    monkeypatch.setenv("XPUTUNE_HICACHE_GHOST", "1")
    with pytest.raises(SystemExit) as exc:
        _load_through_sglang(sgl, monkeypatch)
    assert str(exc.value).startswith(
        "xputune cache plugin refused: " + HIRADIX + "._evict_regular: not found"
    )
    assert plugin.installed() is None


def test_a_global_the_body_no_longer_reads_is_refused(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = sgl.pool_mla.MLATokenToKVPoolHost

    def backup_from_device_all_layer(
        self: Any, device_pool: Any, host_indices: Any, device_indices: Any, io_backend: Any
    ) -> None:
        return None  # same signature, but the copy operator is no longer a module global

    monkeypatch.setattr(cls, "backup_from_device_all_layer", backup_from_device_all_layer)
    monkeypatch.setenv("XPUTUNE_HICACHE_KERNELS", "1")
    with pytest.raises(SystemExit) as exc:
        _load_through_sglang(sgl, monkeypatch)
    assert "backup_from_device_all_layer: no longer calls transfer_kv_all_layer_mla" in str(
        exc.value
    )


def test_warn_mode_logs_the_line_and_serves_unpatched(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delattr(sgl.hiradix_cache.HiRadixCache, "_evict_regular")
    monkeypatch.setenv("XPUTUNE_HICACHE_GHOST", "1")
    monkeypatch.setenv("XPUTUNE_HICACHE_ON_MISMATCH", "warn")
    with caplog.at_level(logging.ERROR, logger="xputune.sglang"):
        _load_through_sglang(sgl, monkeypatch)
    lines = [r.getMessage() for r in caplog.records if r.name == "xputune.sglang"]
    assert len(lines) == 1 and HIRADIX + "._evict_regular" in lines[0]
    assert plugin.installed() is None


def test_another_sglang_release_is_refused(plugin: Any) -> None:
    from xputune.sglang.targets import PluginRefused, check_version

    assert check_version() == "0.5.20"
    with pytest.raises(PluginRefused, match=r"^sglang 0\.5\.21: .*supports sglang 0\.5\.20 only"):
        check_version("0.5.21")


def test_every_target_of_every_feature_matches_the_installed_release(plugin: Any) -> None:
    from xputune.sglang.targets import check_target

    for target in plugin.targets_for(tuple(plugin.FEATURES)):
        assert check_target(target) is not None, target.path
