"""Every --format json document validates against the schema shipped for it (draft 2020-12).

Each case runs the real command on bundled data (examples, saved vendor outputs, a small
trace), so a key renamed in a command without its schema fails here. When a document changes
on purpose: python -m tests.cli.schema_gen NAME, then review the diff.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from tests.cli.schema_cases import CASES, ENV, run_json
from xputune.cli.schema_cmds import schema_names, schema_text

# 1 is a difference found (cli/exits.py): drift from the profile (check, status), changes a dry
# run would make (apply, rollback), something standing out (fleet report), a rank's KV pool
# off its plan (verify)
CHECK_EXIT = {k: (0, 1) for k in ("check", "fleet-report", "apply", "rollback", "status",
                                   "verify")}  # fmt: skip


def test_every_schema_has_a_case_and_every_case_a_schema() -> None:
    assert sorted(CASES) == schema_names()


@pytest.mark.parametrize("name", sorted(CASES))
def test_live_output_matches_its_schema(name: str, tmp_path: Path, monkeypatch) -> None:
    schema = json.loads(schema_text(name))
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    validator = Draft202012Validator(schema)
    for i, case in enumerate(CASES[name]):
        where = tmp_path / str(i)
        where.mkdir()
        for key, value in ENV.get(name, lambda _: {})(where).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(tempfile, "tempdir", str(where))  # a command's temporary files
        argv = case(where)
        code, doc = run_json(argv)
        assert code in CHECK_EXIT.get(name, (0,)), (code, argv, _said(doc))
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in
                  validator.iter_errors(doc)]  # fmt: skip
        assert not errors, f"{' '.join(argv)}:\n" + "\n".join(errors[:10])


def _said(doc: dict) -> object:
    """What a failed case's document says about why (replay's and sweep's verdicts)."""
    keys = ("valid", "invalid_reasons", "tier_check", "stop", "notes", "completion")
    return {k: doc[k] for k in keys if k in doc} or sorted(doc)


def test_a_renamed_key_fails() -> None:
    """The schemas are not vacuous: a document missing a required key is refused."""
    validator = Draft202012Validator(json.loads(schema_text("tiers")))
    code, doc = run_json(CASES["model"][0](Path()))
    assert code == 0 and not validator.is_valid(doc)


def test_schema_command_lists_and_prints(run_cli) -> None:
    code, out, _ = run_cli("schema")
    assert code == 0 and out.split() == schema_names()
    code, out, _ = run_cli("schema", "probe")
    assert code == 0 and json.loads(out)["properties"]["schema_version"] == {"const": 1}
    code, _, err = run_cli("schema", "nope")
    assert code == 2 and err.startswith("xputune: error: no schema named 'nope'")
    assert len(err.splitlines()) == 1
