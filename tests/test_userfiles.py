"""Files a user names: one clear line for each way they fail, and what --model/--config name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xputune.errors import XputuneError
from xputune.userfiles import config_path, model_config, open_binary, read_lines, read_text


def test_each_failure_is_one_line_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "gone.csv"
    with pytest.raises(XputuneError, match=f"^points file not found: {missing}$"):
        read_text(missing, "points file")
    with pytest.raises(XputuneError, match=f"^trace is a directory: {tmp_path}$"):
        open_binary(tmp_path, "trace")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"tokens,ms\n\xe9\n")
    with pytest.raises(XputuneError, match="is not UTF-8 text"):
        read_lines(latin, "measured table")


def test_lines_split_at_newlines_only(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_bytes(b"1,2\n3,4\x0c5\r\n")  # a form feed is not a line break here
    assert read_lines(table, "table") == ["1,2\n", "3,4\x0c5\n"]


def test_model_names_a_file_a_folder_or_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "GLM-5"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 78}))
    assert config_path(str(folder)) == folder / "config.json"
    assert model_config(str(folder), None) == ("GLM-5", {"num_hidden_layers": 78})
    assert model_config(None, folder / "config.json") == ("GLM-5", {"num_hidden_layers": 78})
    assert model_config("glm-5", None) is None  # a preset name: plan/models.py resolves it
    assert model_config("zai-org/GLM-5", None) is None  # a Hugging Face id, no such folder
    assert model_config(None, None) is None


@pytest.mark.parametrize(
    ("text", "expected"), [("{", "not JSON"), ("[1, 2]", "expected a JSON object")]
)
def test_a_config_that_is_not_a_json_object_is_refused(
    tmp_path: Path, text: str, expected: str
) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(text)
    with pytest.raises(XputuneError, match=expected):
        model_config(str(bad), None)
    with pytest.raises(XputuneError, match="not both"):
        model_config("glm-5", bad)
    with pytest.raises(XputuneError, match="model config not found"):
        model_config(str(tmp_path / "other.json"), None)
