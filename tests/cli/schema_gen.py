"""Draft xputune/data/schemas/NAME.json from the live outputs of tests/cli/schema_cases.py.

    python -m tests.cli.schema_gen [NAME...]

For when a JSON document changes on purpose (a key added, renamed or removed): it rewrites the
schema from what the commands print now; review the diff like code. Keys present in every
sample are required; numbers are "number"; a value seen only as null is left open ({}); the
objects listed in MAPS are keyed by data (card names, knobs, env vars), not by field names.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.cli.schema_cases import CASES, ROOT, run_json

SCHEMAS = ROOT / "xputune" / "data" / "schemas"

TITLES = {
    "probe": "xputune probe --format json: the host's cards, NUMA nodes, uplinks, NICs, "
    "relation matrix and settings",
    "smi": "xputune smi --format json: cards as the vendor tool (xpu-smi, nvidia-smi, NVML) "
    "reports them",
    "check": "xputune check --format json: each knob of a profile against the host",
    "apply": "xputune apply --format json: the changes of one transaction (planned or made)",
    "rollback": "xputune rollback --format json: the original values restored (with "
    "--dry-run: the ones a rollback would restore)",
    "status": "xputune status --format json: the profile applied, the units and the watch "
    "that keep it, and whether it holds now",
    "recommend": "xputune recommend --format json: the profile that fits the host, and why",
    "profiles": "xputune profiles --format json: the tuning profiles",
    "profile": "xputune profiles NAME --format json: one profile's effective settings",
    "model": "xputune model --format json: the load-time fit and the transfer it implies",
    "tiers": "xputune tiers --format json: hit rate against cache capacity from a trace",
    "plan": "xputune plan --format json: rank bindings, capacity tiers and SGLang arguments",
    "kernels-plan": "xputune kernels plan --format json: copy segments per KV layout",
    "kernels-build": "xputune kernels build --format json: each copy backend's build status",
    "kernels-selftest": "xputune kernels selftest --format json: each copy operator's check",
    "bench-copy": "xputune bench copy --format json: copy bandwidth beside a plain memcpy",
    "bench-host": "xputune bench host --format json: pinned host buffer costs",
    "fleet-report": "xputune fleet report --format json: drift, degraded links and layout "
    "outliers over many hosts",
    "replay": "xputune replay --format json: a trace replayed on a running server, hits per "
    "tier beside the prediction",
    "sweep": "xputune sweep --format json: a server launched, replayed and stopped per L2 size",
}

#: JSON paths ($ = the document, [] = any item, * = any value of a map) of objects keyed by data.
MAPS = {
    "probe": {"$.relations", "$.relations.*", "$.relation_legend"},
    "smi": {
        "$.topology.relations",
        "$.topology.relations.*",
        "$.topology.legend",
        "$.topology.nics",
    },
    "profile": {"$.knobs"},
    "plan": {"$.env", "$.l3.device_map"},
    "bench-host": {"$.runs[].placement.pages_per_node"},
    "fleet-report": {"$.hosts[].check.not_holding"},
    "status": {"$.watch.events", "$.watch.drift", "$.watch.reapplies", "$.watch.failures"},
}


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def infer(samples: list[Any], path: str, maps: set[str]) -> dict[str, Any]:
    """One schema that every sample satisfies."""
    types = {_type(s) for s in samples}
    concrete = sorted(types - {"null"})
    if not concrete:
        return {}
    named = [*concrete, "null"] if "null" in types else concrete
    schema: dict[str, Any] = {"type": named[0] if len(named) == 1 else named}
    objects = [s for s in samples if isinstance(s, dict)]
    arrays = [s for s in samples if isinstance(s, list)]
    if objects:
        if path in maps:
            values = [v for o in objects for v in o.values()]
            schema["additionalProperties"] = infer(values, path + ".*", maps) if values else {}
        else:
            keys = list(dict.fromkeys(k for o in objects for k in o))
            schema["properties"] = {
                k: infer([o[k] for o in objects if k in o], f"{path}.{k}", maps) for k in keys
            }
            schema["required"] = [k for k in keys if all(k in o for o in objects)]
    if arrays:
        items = [v for a in arrays for v in a]
        schema["items"] = infer(items, path + "[]", maps) if items else {}
    return schema


def draft(name: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    body = infer(docs, "$", MAPS.get(name, set()))
    body["properties"]["schema_version"] = {"const": 1}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://xputune.invalid/schemas/{name}.json",
        "title": TITLES[name],
        "description": "Additive changes keep schema_version 1: consumers must ignore keys "
        "they do not know. Renaming or removing a key raises schema_version.",
        **body,
    }


def main(names: list[str]) -> None:
    for name in names or list(CASES):
        docs = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, case in enumerate(CASES[name]):
                (Path(tmp) / str(i)).mkdir()
                code, doc = run_json(case(Path(tmp) / str(i)))
                assert code in (0, 1), (name, code)
                docs.append(doc)
        path = SCHEMAS / f"{name}.json"
        path.write_text(json.dumps(draft(name, docs), indent=2) + "\n")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
