"""Device runtime lookup: absent or driverless runtimes give None, so callers fall back."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from xputune.devices import runtime


def test_missing_libraries_give_no_registrar(monkeypatch):
    monkeypatch.setattr(runtime, "_load", lambda names: None)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert runtime.xpu_registrar() is None
    assert runtime.cuda_registrar() is None
    assert runtime.device_registrar() is None


def test_live_lookup_never_raises():
    found = runtime.device_registrar()
    assert found is None or found.name in ("cudaHostRegister", "xpu_host_register")


def test_xpu_registrar_reports_runtime_errors(monkeypatch):
    calls = []

    def xpu_host_register(ptr, size, flags):
        calls.append(("reg", ptr, size, flags))
        return 0 if size else 3

    def xpu_host_unregister(ptr):
        calls.append(("unreg", ptr))
        return 0

    lib = SimpleNamespace(
        xpu_host_register=xpu_host_register, xpu_host_unregister=xpu_host_unregister
    )
    monkeypatch.setattr(runtime, "_load", lambda names: lib)
    reg = runtime.xpu_registrar()
    assert reg is not None and reg.name == "xpu_host_register"
    reg.register(0x1000, 4096)
    reg.unregister(0x1000)
    assert calls == [("reg", 0x1000, 4096, 0), ("unreg", 0x1000)]
    with pytest.raises(runtime.RegistrationError, match="error 3"):
        reg.register(0x1000, 0)
