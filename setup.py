"""Build the native libraries that come with the wheel (xputune/kernels/native.py's table).

Everything else about the package is in pyproject.toml. The libraries marked WHEEL there (plain
C/C++, no vendor toolkit) are built as setuptools Extensions, for setuptools' compiler support,
build folder and wheel layout, but they are not Python modules: each is a shared library with a
small C ABI that build.load_native loads with ctypes, so it gets the file name that loader
looks for (native.packaged_name: a digest of its sources and flags, under xputune/kernels/libs/)
and exports no PyInit_ symbol. Nothing in them uses the Python C API, so the wheel is tagged
py3-none-<platform>: one wheel per platform for every Python 3 version.

An editable install builds none of them: a checkout builds them on first use into the checked
per-user cache (as the CUDA and XPU backends always are), so an edited source is never shadowed
by a library built before the edit.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

SOURCES = "kernels"  # relative: setuptools wants the paths of an Extension's sources so


def _native():
    """native.py read by path: xputune and its dependencies are not installed while building."""
    path = Path(__file__).resolve().parent / "xputune" / "kernels" / "native.py"
    spec = importlib.util.spec_from_file_location("_xputune_native", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look a class's module up there
    spec.loader.exec_module(module)
    return module


native = _native()
WHEEL_LIBRARIES = {
    f"{native.PACKAGED_MODULE}.{lib.name}": lib
    for lib in native.LIBRARIES.values()
    if lib.when == native.WHEEL
}


class BuildNative(build_ext):
    """build_ext for ctypes libraries: the loader's file names, no module init symbol."""

    def run(self) -> None:
        if self.editable_mode:
            print("xputune: editable install: native libraries are built on first use")
            return
        super().run()

    def build_extensions(self) -> None:
        """Compiled and linked with our flags alone, not with Python's CFLAGS and LDSHARED.

        Those are for Python modules and may carry the paths of the machine Python was built
        on: an rpath into the interpreter's prefix would have a library that root loads look
        for its dependencies in a folder of that machine. (Every Extension here is one of
        native.py's libraries; a real Python module would need Python's flags back.)
        """
        cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
        cxx = shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")
        wanted = {
            "compiler_so": [*cc, "-fPIC"],
            "compiler_so_cxx": [*cxx, "-fPIC"],
            "compiler_cxx": cxx,
            "linker_so": [*cc, "-shared"],
            "linker_so_cxx": [*cxx, "-shared"],
            "linker_exe_cxx": cxx,
        }
        known = self.compiler.executables  # the set varies with setuptools' version
        self.compiler.set_executables(**{k: v for k, v in wanted.items() if k in known})
        super().build_extensions()

    def get_ext_filename(self, fullname: str) -> str:
        """Asked with a dotted name (setuptools) or its last part (distutils' get_ext_fullpath)."""
        lib = WHEEL_LIBRARIES.get(fullname)
        if lib is None:
            return super().get_ext_filename(fullname)
        name = native.packaged_name(lib, Path(SOURCES))
        return os.path.join(*fullname.split(".")[:-1], name)

    def get_ext_fullpath(self, ext_name: str) -> str:
        path = super().get_ext_fullpath(ext_name)
        lib = WHEEL_LIBRARIES.get(self.get_ext_fullname(ext_name))
        if lib is None:
            return path
        return os.path.join(os.path.dirname(path), native.packaged_name(lib, Path(SOURCES)))

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return [] if ext.name in WHEEL_LIBRARIES else super().get_export_symbols(ext)


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: the libraries depend on the platform, not on Python's ABI."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


def _extension(fullname: str, lib) -> Extension:
    headers = sorted(str(p) for p in Path(SOURCES).rglob("*.h"))
    return Extension(
        fullname,
        sources=[f"{SOURCES}/{s}" for s in lib.sources],
        include_dirs=[SOURCES, *(f"{SOURCES}/{d}" for d in lib.include_dirs)],
        extra_compile_args=list(lib.cflags),
        extra_link_args=list(lib.ldflags),
        depends=headers,
        language=lib.language,
    )


setup(
    ext_modules=[_extension(name, lib) for name, lib in WHEEL_LIBRARIES.items()],
    cmdclass={"build_ext": BuildNative, "bdist_wheel": PlatformWheel},
)
