"""Host-memory registration with a device runtime (cudaHostRegister, xpu_host_register).

Registration pins host pages and maps them for the device's DMA engine, which is what makes
D2H/H2D copies of a host KV pool asynchronous and fast. The lookups are plain ctypes so that
neither torch nor a vendor Python package is needed; where the runtime library is absent the
caller falls back to mlock, which pins the same way minus the device mapping.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable
from dataclasses import dataclass

from xputune.errors import HostError

CUDART_NAMES = ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0")
XPURT_NAMES = ("libxpurt.so",)
CUDA_HOST_REGISTER_PORTABLE = 1  # pinned for every CUDA context, not only the current one


class RegistrationError(HostError):
    """The runtime refused to register or unregister host memory."""


@dataclass(frozen=True)
class HostRegistrar:
    """A register/unregister pair: register(ptr, size) pins, unregister(ptr) releases."""

    name: str
    register: Callable[[int, int], None]
    unregister: Callable[[int], None]


def _load(names: tuple[str, ...]) -> ctypes.CDLL | None:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    stem = names[0].removeprefix("lib").split(".so")[0]
    found = ctypes.util.find_library(stem)
    if found:
        try:
            return ctypes.CDLL(found)
        except OSError:
            return None
    return None


def cuda_registrar(flags: int = CUDA_HOST_REGISTER_PORTABLE) -> HostRegistrar | None:
    """cudaHostRegister through libcudart (torch's copy when torch is already imported)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        rt = torch.cuda.cudart()

        def t_register(ptr: int, size: int) -> None:
            _cuda_check(int(rt.cudaHostRegister(ptr, size, flags)), "cudaHostRegister", None)

        def t_unregister(ptr: int) -> None:
            _cuda_check(int(rt.cudaHostUnregister(ptr)), "cudaHostUnregister", None)

        return HostRegistrar("cudaHostRegister", t_register, t_unregister)

    lib = _load(CUDART_NAMES)
    if lib is None:
        return None
    count = ctypes.c_int(0)
    if lib.cudaGetDeviceCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None  # a runtime without a driver or a device registers nothing
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    lib.cudaGetErrorString.restype = ctypes.c_char_p

    def register(ptr: int, size: int) -> None:
        _cuda_check(lib.cudaHostRegister(ptr, size, flags), "cudaHostRegister", lib)

    def unregister(ptr: int) -> None:
        _cuda_check(lib.cudaHostUnregister(ptr), "cudaHostUnregister", lib)

    return HostRegistrar("cudaHostRegister", register, unregister)


def _cuda_check(code: int, what: str, lib: ctypes.CDLL | None) -> None:
    if code == 0:
        return
    text = lib.cudaGetErrorString(code).decode() if lib is not None else f"error {code}"
    raise RegistrationError(f"{what} failed: {text}")


def xpu_registrar(flags: int = 0) -> HostRegistrar | None:
    """xpu_host_register through libxpurt.

    The unregister entry point is not in the public header excerpt we know of; it is looked up
    as xpu_host_unregister and, when missing, unregistering is left to process exit (the
    driver releases registrations of a closed context).
    """
    lib = _load(XPURT_NAMES)
    if lib is None or not hasattr(lib, "xpu_host_register"):
        return None
    lib.xpu_host_register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    has_unregister = hasattr(lib, "xpu_host_unregister")
    if has_unregister:
        lib.xpu_host_unregister.argtypes = [ctypes.c_void_p]

    def register(ptr: int, size: int) -> None:
        code = lib.xpu_host_register(ptr, size, flags)
        if code != 0:
            raise RegistrationError(f"xpu_host_register failed: error {code}")

    def unregister(ptr: int) -> None:
        if not has_unregister:
            return
        code = lib.xpu_host_unregister(ptr)
        if code != 0:
            raise RegistrationError(f"xpu_host_unregister failed: error {code}")

    return HostRegistrar("xpu_host_register", register, unregister)


def device_registrar() -> HostRegistrar | None:
    """The first runtime present: Kunlunxin first (it also poses as CUDA), then CUDA."""
    return xpu_registrar() or cuda_registrar()
