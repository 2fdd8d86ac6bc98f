"""A pynvml-style ctypes binding of Kunlunxin's libxpuml.so (header xpuml.h).

Same shape as pynvml so that anyone who has read NVML code reads this: module-level functions
with the vendor's names, C structs as ctypes Structures, every non-zero return code raised as
XPUMLError (one subclass per code). Functions are looked up on first use, so a library that
lacks one (an older driver) fails with code 13 naming it, not at load time. No vendor Python
package is needed, and nothing here runs unless a caller asks: the probe imports this module
only after it has found a library file.

The library is loaded once per process (a dlopen cannot be undone); forget_library() drops this
module's hold on it so that tests and long-lived callers can load another path.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from xputune.devices.libpath import XPUML_ENV, XPUML_PATHS, override
from xputune.errors import XputuneError

# Return codes (xpuml.h).
XPUML_SUCCESS = 0
XPUML_ERROR_NOT_SUPPORTED = 3
XPUML_ERROR_DRIVER_NOT_LOADED = 9
XPUML_ERROR_LIBRARY_NOT_FOUND = 12
XPUML_ERROR_FUNCTION_NOT_FOUND = 13
XPUML_ERROR_DEVICE_LOST = 15
XPUML_ERROR_UNKNOWN = 999

# Buffer sizes passed to the string getters (the library writes at most that many bytes).
XPUML_DEVICE_NAME_BUFFER_SIZE = 96
XPUML_DEVICE_SERIAL_BUFFER_SIZE = 64
XPUML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80
XPUML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32

XPUML_TEMPERATURE_XPU = 0  # sensor index for xpumlDeviceGetTemperature (the die)

SONAME = "libxpuml.so"

_MESSAGES = {
    XPUML_ERROR_NOT_SUPPORTED: "not supported",
    XPUML_ERROR_DRIVER_NOT_LOADED: "driver not loaded",
    XPUML_ERROR_LIBRARY_NOT_FOUND: "library not found",
    XPUML_ERROR_FUNCTION_NOT_FOUND: "function not found",
    XPUML_ERROR_DEVICE_LOST: "device lost",
    XPUML_ERROR_UNKNOWN: "unknown error",
}


class XPUMLError(XputuneError):
    """A non-zero xpuml return code; `XPUMLError(code)` builds the subclass for that code.

    A user error (XputuneError), so the CLI prints one line: a missing driver or library is the
    machine's state, not a bug in xputune.
    """

    _by_code: ClassVar[dict[int, type[XPUMLError]]] = {}
    code_value: ClassVar[int | None] = None

    def __init_subclass__(cls, code: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code_value = code
            XPUMLError._by_code[code] = cls

    def __new__(cls, code: int | None = None, detail: str | None = None) -> XPUMLError:
        if cls is XPUMLError and code is not None:
            cls = XPUMLError._by_code.get(code, XPUMLError)
        return super().__new__(cls)

    def __init__(self, code: int | None = None, detail: str | None = None) -> None:
        value = code if code is not None else self.code_value
        self.value: int = XPUML_ERROR_UNKNOWN if value is None else value
        self.detail = detail
        super().__init__(self.value, detail)

    def __str__(self) -> str:
        text = f"xpuml: {xpumlErrorString(self.value)} (code {self.value})"
        return f"{text}: {self.detail}" if self.detail else text


class XPUMLError_NotSupported(XPUMLError, code=XPUML_ERROR_NOT_SUPPORTED):
    """The card or driver does not implement this query."""


class XPUMLError_DriverNotLoaded(XPUMLError, code=XPUML_ERROR_DRIVER_NOT_LOADED):
    """The kunlun kernel driver is not loaded."""


class XPUMLError_LibraryNotFound(XPUMLError, code=XPUML_ERROR_LIBRARY_NOT_FOUND):
    """No libxpuml.so could be loaded."""


class XPUMLError_FunctionNotFound(XPUMLError, code=XPUML_ERROR_FUNCTION_NOT_FOUND):
    """The loaded libxpuml.so lacks the function (older release)."""


class XPUMLError_DeviceLost(XPUMLError, code=XPUML_ERROR_DEVICE_LOST):
    """The card fell off the bus or stopped answering."""


class XPUMLError_Unknown(XPUMLError, code=XPUML_ERROR_UNKNOWN):
    """The library's catch-all failure."""


# C types (xpuml.h).
class struct_c_xpumlDevice_t(ctypes.Structure):
    """Opaque device; only pointers to it are handled."""


c_xpumlDevice_t = ctypes.POINTER(struct_c_xpumlDevice_t)


class c_xpumlPciInfo_t(ctypes.Structure):
    _fields_ = [
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("function", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * XPUML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    ]


class c_xpumlMemory_t(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class c_xpumlUtilization_t(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


_P = ctypes.POINTER
_SIGNATURES: dict[str, list[Any]] = {
    "xpumlInit": [],
    "xpumlShutdown": [],
    "xpumlErrorString": [ctypes.c_int],
    "xpumlSystemGetDriverVersion": [ctypes.c_char_p, ctypes.c_uint],
    "xpumlDeviceGetCount": [_P(ctypes.c_uint)],
    "xpumlDeviceGetHandleByIndex": [ctypes.c_uint, _P(c_xpumlDevice_t)],
    "xpumlDeviceGetName": [c_xpumlDevice_t, ctypes.c_char_p, ctypes.c_uint],
    "xpumlDeviceGetSerial": [c_xpumlDevice_t, ctypes.c_char_p, ctypes.c_uint],
    "xpumlDeviceGetPciInfo": [c_xpumlDevice_t, _P(c_xpumlPciInfo_t)],
    "xpumlDeviceGetMemoryInfo": [c_xpumlDevice_t, _P(c_xpumlMemory_t)],
    "xpumlDeviceGetUtilizationRates": [c_xpumlDevice_t, _P(c_xpumlUtilization_t)],
    "xpumlDeviceGetTemperature": [c_xpumlDevice_t, ctypes.c_int, _P(ctypes.c_uint)],
    "xpumlDeviceGetPowerUsage": [c_xpumlDevice_t, _P(ctypes.c_uint)],
    "xpumlDeviceGetMinorNumber": [c_xpumlDevice_t, _P(ctypes.c_uint)],
}


# Library state: one loaded library per process, guarded by one lock.
_lock = threading.RLock()
_lib: ctypes.CDLL | None = None
_lib_path: str | None = None
_functions: dict[str, Callable[..., Any]] = {}
_refcount = 0


def candidate_paths() -> list[str]:
    """Where load_library looks: the override alone when set, else the install paths."""
    explicit = override(XPUML_ENV)
    if explicit:
        return [explicit]
    return [*(p for p in XPUML_PATHS if os.path.exists(p)), SONAME]


def load_library(path: str | None = None) -> str:
    """Load libxpuml.so from `path` (else candidate_paths()); returns the path it loaded.

    Loading a different path than the one loaded replaces it; the same path is a no-op.
    """
    global _lib, _lib_path
    with _lock:
        if _lib is not None and (path is None or path == _lib_path):
            return _lib_path or SONAME
        tried = [path] if path else candidate_paths()
        errors: list[str] = []
        for candidate in tried:
            try:
                lib = ctypes.CDLL(candidate)
            except OSError as exc:
                errors.append(str(exc))
                continue
            forget_library()
            _lib, _lib_path = lib, candidate
            return candidate
        where = "; ".join(errors) or "no candidate path"
        raise XPUMLError(XPUML_ERROR_LIBRARY_NOT_FOUND, f"set {XPUML_ENV} to its path ({where})")


def forget_library() -> None:
    """Drop the loaded library and cached functions, so the next call loads afresh."""
    global _lib, _lib_path, _refcount
    with _lock:
        _lib, _lib_path, _refcount = None, None, 0
        _functions.clear()


def library_path() -> str | None:
    """The path of the loaded library, None when none is loaded."""
    return _lib_path


def _function(name: str) -> Callable[..., Any]:
    """The C function `name`, looked up once; loads the library on first use."""
    fn = _functions.get(name)
    if fn is not None:
        return fn
    with _lock:
        if _lib is None:
            load_library()
        assert _lib is not None
        try:
            fn = getattr(_lib, name)
        except AttributeError:
            raise XPUMLError(XPUML_ERROR_FUNCTION_NOT_FOUND, f"{_lib_path} has no {name}") from None
        fn.argtypes = _SIGNATURES[name]
        fn.restype = ctypes.c_char_p if name == "xpumlErrorString" else ctypes.c_int
        _functions[name] = fn
        return fn


def _check(ret: int) -> None:
    if ret != XPUML_SUCCESS:
        raise XPUMLError(ret)


def _call(name: str, *args: Any) -> None:
    _check(_function(name)(*args))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _string(name: str, handle: Any, size: int) -> str:
    buf = ctypes.create_string_buffer(size)
    if handle is None:
        _call(name, buf, ctypes.c_uint(size))
    else:
        _call(name, handle, buf, ctypes.c_uint(size))
    return _text(buf.value)


def _uint(name: str, handle: Any) -> int:
    value = ctypes.c_uint()
    _call(name, handle, ctypes.byref(value))
    return value.value


# The vendor's functions.
def xpumlInit() -> None:
    """Load the library if needed and initialise it (counted, like nvmlInit)."""
    global _refcount
    _call("xpumlInit")
    with _lock:
        _refcount += 1


def xpumlShutdown() -> None:
    global _refcount
    _call("xpumlShutdown")
    with _lock:
        _refcount = max(0, _refcount - 1)


def xpumlErrorString(result: int) -> str:
    """The library's text for a return code; a built-in text when no library answers."""
    if _lib is not None:
        try:
            raw = _function("xpumlErrorString")(result)
        except XPUMLError:
            raw = None
        if raw:
            return _text(raw)
    return _MESSAGES.get(result, f"unknown error code {result}")


def xpumlSystemGetDriverVersion() -> str:
    return _string("xpumlSystemGetDriverVersion", None, XPUML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE)


def xpumlDeviceGetCount() -> int:
    count = ctypes.c_uint()
    _call("xpumlDeviceGetCount", ctypes.byref(count))
    return count.value


def xpumlDeviceGetHandleByIndex(index: int) -> Any:
    handle = c_xpumlDevice_t()
    _call("xpumlDeviceGetHandleByIndex", ctypes.c_uint(index), ctypes.byref(handle))
    return handle


def xpumlDeviceGetName(handle: Any) -> str:
    return _string("xpumlDeviceGetName", handle, XPUML_DEVICE_NAME_BUFFER_SIZE)


def xpumlDeviceGetSerial(handle: Any) -> str:
    return _string("xpumlDeviceGetSerial", handle, XPUML_DEVICE_SERIAL_BUFFER_SIZE)


def xpumlDeviceGetPciInfo(handle: Any) -> c_xpumlPciInfo_t:
    info = c_xpumlPciInfo_t()
    _call("xpumlDeviceGetPciInfo", handle, ctypes.byref(info))
    return info


def xpumlDeviceGetMemoryInfo(handle: Any) -> c_xpumlMemory_t:
    """Total, free and used device memory in bytes."""
    info = c_xpumlMemory_t()
    _call("xpumlDeviceGetMemoryInfo", handle, ctypes.byref(info))
    return info


def xpumlDeviceGetUtilizationRates(handle: Any) -> c_xpumlUtilization_t:
    """Percent of the last sample period the cores (gpu) and memory were busy."""
    info = c_xpumlUtilization_t()
    _call("xpumlDeviceGetUtilizationRates", handle, ctypes.byref(info))
    return info


def xpumlDeviceGetTemperature(handle: Any, sensor: int = XPUML_TEMPERATURE_XPU) -> int:
    """Degrees Celsius."""
    value = ctypes.c_uint()
    _call("xpumlDeviceGetTemperature", handle, ctypes.c_int(sensor), ctypes.byref(value))
    return value.value


def xpumlDeviceGetPowerUsage(handle: Any) -> int:
    """Milliwatts, as NVML reports it."""
    return _uint("xpumlDeviceGetPowerUsage", handle)


def xpumlDeviceGetMinorNumber(handle: Any) -> int:
    """N of /dev/xpuN."""
    return _uint("xpumlDeviceGetMinorNumber", handle)
