"""The preflight against real interpreters: the test environment's own (sglang 0.5.20, the
plugin installed with xputune), and a throwaway venv that has sglang but not xputune, as a
user's SGLang environment is before xputune is installed beside it.

Marked `sglang` and skipped (with the reason) where sglang 0.5.20 is not installed here, as
the lane of tests/sglang is.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from xputune import __version__
from xputune.launch import preflight
from xputune.launch import sglang as launch

ROOT = Path(__file__).resolve().parents[2]


def _unavailable() -> str | None:
    try:
        found = version("sglang")
    except PackageNotFoundError:
        return "sglang is not installed (python tests/sglang/install_sglang.py)"
    return None if found == "0.5.20" else f"sglang {found} is installed; this needs 0.5.20"


pytestmark = [
    pytest.mark.sglang,
    pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable())),
]


@pytest.fixture(autouse=True)
def _clean(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(preflight.PYTHON_VARIABLE, raising=False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)  # python -c puts the working folder on the path: not the checkout


def _ours(entry: Path) -> bool:
    """xputune's own entries of a site-packages: its metadata, its editable finder, its code,
    and a .pth that puts the checkout on the path."""
    name = entry.name
    if name.startswith("xputune") or (name.startswith("__editable__") and "xputune" in name):
        return True
    if name.endswith(".pth"):
        text = entry.read_text(errors="replace")
        return str(ROOT) in text or "xputune" in text
    return False


@pytest.fixture(scope="module")
def sglang_without_xputune(tmp_path_factory) -> Path:
    """A venv whose site-packages links every entry of this one but xputune's."""
    venv = tmp_path_factory.mktemp("sglang-env") / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    site = Path(purelib)
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in sorted(ours.iterdir()):
        if not _ours(entry) and not (site / entry.name).exists():
            os.symlink(entry, site / entry.name)
    return python


def test_this_environment_has_sglang_and_the_plugin() -> None:
    found = preflight.ask(sys.executable)
    assert found.error is None and found.sglang == "0.5.20"
    assert found.plugin == "xputune.sglang.plugin:register" and found.plugin_error is None
    assert found.xputune == __version__
    release, lines = preflight.release_of(found)
    assert release.version == "0.5.20" and release.tested and lines == []
    assert preflight.problems(found, plugin_needed=True) == []


def test_a_venv_with_sglang_but_not_xputune(sglang_without_xputune) -> None:
    found = preflight.ask(str(sglang_without_xputune))
    assert found.error is None and found.sglang == "0.5.20"
    assert found.plugin is None and found.xputune is None
    [problem] = preflight.problems(found, plugin_needed=True)
    assert f"-m pip install xputune=={__version__}`" in problem


def test_launching_into_it_is_exit_3_with_the_fix(
    run_cli, sglang_without_xputune, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(launch, "execute", lambda spec: pytest.fail("must not exec"))
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, '
        '"num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "bfloat16"}'
    )
    python = str(sglang_without_xputune)
    args = ("--python", python, "--", "--model-path", str(model), "--device", "cpu")
    code, out, err = run_cli("launch", "sglang", *args)
    assert code == 3 and out == "" and err.count("\n") == 1, err
    assert err == (
        f"xputune: error: xputune's SGLang plugin is not installed for {python} (no entry "
        f"point xputune in sglang.srt.plugins): `{python} -m pip install xputune=={__version__}`"
        "\n"
    )
    code, out, err = run_cli("launch", "sglang", "--dry-run", *args)
    words = shlex.split(out.replace("\\\n", " "))
    assert code == 3 and words[words.index("-m") - 1 :][:2] == [python, "-m"]
    assert "would refuse: xputune's SGLang plugin is not installed for " in err
