"""`fleet report`: many hosts' probe (and check) JSON documents merged into outliers.

Input: `xputune probe --format json` files, optionally with `xputune check --format json` files
of the same hosts. A host is named by its file: `node7.json`, `node7.probe.json` and
`node7.check.json` are all host node7 (what the document is comes from its content, not its
name). Findings: hosts whose check drifts, cards (and uplinks) whose PCIe link runs below what it
can, and hosts whose layout (card model and count, cards per NUMA node, cards per uplink) is not
the one most hosts have. Reading is strict: a file that is not such a document, or one of a
newer schema_version than this xputune knows, is refused naming the file; so is one past
userfiles.DOCUMENT_MAX, one that is not strict JSON (NaN, Infinity), and one whose values are
out of any real range (a negative NUMA node, a link of 10^9 GT/s, a name of a megabyte): what
the report prints or writes must be what a probe could have written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xputune.errors import XputuneError
from xputune.topology.serialize import SCHEMA_VERSION
from xputune.userfiles import DOCUMENT_MAX, loads, printable, read_text

REPORT_SCHEMA_VERSION = 1
CHECK_SCHEMA_VERSION = 1  # `check --format json`
ASPECTS = ("cards", "cards_per_numa_node", "cards_per_uplink")
#: bounds on what a probe or check writes: longer strings and larger numbers are not a host's
NAME_MAX = 256  # characters of a name, model, bus id, profile, knob or verdict
NUMA_MAX = 1023  # Linux numbers NUMA nodes below 1024 (NODES_SHIFT <= 10)
SPEED_MAX = 1000.0  # GT/s of a PCIe link (PCIe 7 runs 128)
WIDTH_MAX = 64  # lanes of a PCIe link (x32 is the widest defined)


class FleetInputError(XputuneError):
    """An input file that is not a probe or check document this xputune can read."""


@dataclass
class Host:
    name: str
    files: list[str] = field(default_factory=list)
    probe: dict[str, Any] | None = None
    check: dict[str, Any] | None = None


def host_of(path: str) -> str:
    """node7.probe.json, node7.check.json, node7.json -> node7."""
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    if base.endswith(".json"):
        base = base[: -len(".json")]
    for tail in (".probe", ".check"):
        if base.endswith(tail):
            base = base[: -len(tail)]
    return base or path


def _fail(path: str, why: str) -> FleetInputError:
    return FleetInputError(f"{printable(path)}: {why}")


def _version(path: str, doc: dict[str, Any], known: int, what: str) -> None:
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail(path, f"not a {what} document (schema_version is {version!r})")
    if version > known:
        raise _fail(path, f"{what} document of schema_version {version}, newer than this "
                          f"xputune reads ({known}); upgrade xputune to read it")  # fmt: skip


def _need(
    path: str,
    obj: Any,
    key: str,
    kinds: type | tuple[type, ...],
    where: str,
    most: float | None = None,
) -> Any:
    """obj[key], of one of `kinds`; a string at most NAME_MAX long, a number within 0..most."""
    if not isinstance(obj, dict) or key not in obj:
        raise _fail(path, f"probe document without {where}{key}")
    value = obj[key]
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise _fail(path, f"{where}{key} is {type(value).__name__}, not what probe writes")
    if isinstance(value, str) and len(value) > NAME_MAX:
        raise _fail(path, f"{where}{key} is {len(value):,} characters long (at most {NAME_MAX})")
    if most is not None and isinstance(value, int | float) and not 0 <= value <= most:
        raise _fail(path, f"{where}{key} is {repr(value)[:40]}, out of range (0..{most:g})")
    return value


def _check_link(path: str, link: dict[str, Any], where: str) -> None:
    speeds = [_need(path, link, key, (int, float, type(None)), where, SPEED_MAX)
              for key in ("current_speed_gts", "max_speed_gts")]  # fmt: skip
    widths = [_need(path, link, key, (int, type(None)), where, WIDTH_MAX)
              for key in ("current_width", "max_width")]  # fmt: skip
    if _need(path, link, "degraded", bool, where) and (None in speeds or widths[1] is None):
        raise _fail(path, f"{where}degraded without the speeds and width it is judged by")


def _check_probe(path: str, doc: dict[str, Any]) -> None:
    _version(path, doc, SCHEMA_VERSION, "probe")
    cards = _need(path, doc, "cards", list, "")
    for i, card in enumerate(cards):
        where = f"cards[{i}]."
        _need(path, card, "name", str, where)
        _need(path, card, "model", str, where)
        _need(path, card, "bdf", str, where)
        _need(path, card, "numa_node", (int, type(None)), where, NUMA_MAX)
        _need(path, card, "uplink", (str, type(None)), where)
        _check_link(path, _need(path, card, "link", dict, where), where + "link.")
        _need(path, card, "path", list, where)
    for i, uplink in enumerate(_need(path, doc, "uplinks", list, "")):
        where = f"uplinks[{i}]."
        _need(path, uplink, "bdf", str, where)
        _need(path, uplink, "cards", list, where)
        _check_link(path, _need(path, uplink, "link", dict, where), where + "link.")


def _check_check(path: str, doc: dict[str, Any]) -> None:
    _version(path, doc, CHECK_SCHEMA_VERSION, "check")
    if not isinstance(doc.get("profile"), str) or not isinstance(doc.get("ok"), bool):
        raise _fail(path, "check document without profile and ok")
    if len(doc["profile"]) > NAME_MAX:
        raise _fail(
            path, f"profile is {len(doc['profile']):,} characters long (at most {NAME_MAX})"
        )
    rows = doc.get("rows")
    if not isinstance(rows, list) or not all(
        isinstance(r, dict)
        and isinstance(r.get("knob"), str)
        and isinstance(r.get("verdict"), str)
        and len(r["knob"]) <= NAME_MAX
        and len(r["verdict"]) <= NAME_MAX
        for r in rows
    ):
        raise _fail(path, "check document whose rows are not knob/verdict rows")


def _ordering(port: Any) -> dict[str, bool | None]:
    """A port's IDO bits as the report reads them: true, false, or unknown for anything else."""
    found = port.get("ordering") if isinstance(port, dict) else None
    found = found if isinstance(found, dict) else {}
    return {k: found.get(k) if isinstance(found.get(k), bool) else None
            for k in ("request", "completion")}  # fmt: skip


def _slim(kind: str, doc: dict[str, Any]) -> dict[str, Any]:
    """What the report reads of a checked document, and nothing else: a fleet's documents are
    held together, so each costs what its cards and rows need, not what its file held."""
    if kind == "check":
        rows = [{"knob": r["knob"], "verdict": r["verdict"]} for r in doc["rows"]]
        return {"profile": doc["profile"], "ok": doc["ok"], "rows": rows}
    link_keys = ("current_speed_gts", "max_speed_gts", "current_width", "max_width", "degraded")
    cards = [{**{k: c[k] for k in ("name", "model", "bdf", "numa_node", "uplink")},
              "link": {k: c["link"][k] for k in link_keys},
              "path": [{"ordering": _ordering(port)} for port in c["path"]]}
             for c in doc["cards"]]  # fmt: skip
    uplinks = [{"bdf": u["bdf"], "link": {k: u["link"][k] for k in link_keys}}
               for u in doc["uplinks"]]  # fmt: skip
    return {"cards": cards, "uplinks": uplinks}


def load_files(paths: Iterable[str]) -> list[Host]:
    """The hosts of the probe and check documents at `paths`, each file read within
    DOCUMENT_MAX and refused unless it is a regular file (userfiles), one at a time."""
    what = "probe or check document"
    return load((path, read_text(Path(path), what, DOCUMENT_MAX)) for path in paths)


def load(files: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[Host]:
    """(path, text) pairs, to hosts (in the order first named). Strict: FleetInputError on
    any bad file, naming it. Each document is kept slimmed (_slim) once checked."""
    hosts: dict[str, Host] = {}
    pairs = files.items() if isinstance(files, Mapping) else files
    for path, text in pairs:
        try:
            doc = loads(text)
        except ValueError as exc:
            raise _fail(path, str(exc)) from None
        if not isinstance(doc, dict):
            raise _fail(path, f"not a probe or check document (a JSON {type(doc).__name__})")
        if "cards" in doc:
            kind = "probe"
            _check_probe(path, doc)
        elif "rows" in doc and "profile" in doc:
            kind = "check"
            _check_check(path, doc)
        else:
            raise _fail(path, "neither a probe document (cards) nor a check document (rows)")
        host = hosts.setdefault(host_of(path), Host(host_of(path)))
        if getattr(host, kind) is not None:
            raise _fail(path, f"a second {kind} document for host {host.name} "
                              f"(also in {', '.join(host.files)})")  # fmt: skip
        setattr(host, kind, _slim(kind, doc))
        host.files.append(path)
    return list(hosts.values())


def _layout(probe: dict[str, Any]) -> dict[str, Any]:
    cards = probe["cards"]
    models = Counter(c["model"] for c in cards)
    per_node = Counter("?" if c["numa_node"] is None else str(c["numa_node"]) for c in cards)
    per_uplink = Counter(c["uplink"] for c in cards if c["uplink"] is not None)
    return {
        "cards": ", ".join(f"{n}x {m}" for m, n in sorted(models.items())) or "none",
        "cards_per_numa_node": " ".join(
            f"{k}:{v}" for k, v in sorted(per_node.items(), key=lambda kv: _node_key(kv[0]))
        ),
        "cards_per_uplink": " ".join(str(n) for n in sorted(per_uplink.values(), reverse=True)),
    }


def _node_key(node: str) -> tuple[int, int | str]:
    return (0, int(node)) if node.isdigit() else (1, node)


def _gts(speed: float | None) -> str:
    return "?" if speed is None else f"{speed:g}"


def _degraded(probe: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for card in probe["cards"]:
        if card["link"]["degraded"]:
            out.append({"card": card["name"], "bdf": card["bdf"], **_link(card["link"])})
    for uplink in probe["uplinks"]:
        if uplink["link"]["degraded"]:
            out.append({"card": None, "uplink": uplink["bdf"], "bdf": uplink["bdf"],
                        **_link(uplink["link"])})  # fmt: skip
    return out


def _link(link: dict[str, Any]) -> dict[str, Any]:
    return {k: link.get(k) for k in ("current_speed_gts", "current_width", "max_speed_gts",
                                     "max_width")}  # fmt: skip


def _ido(probe: dict[str, Any]) -> str:
    states = set()
    for card in probe["cards"]:
        for port in card["path"]:
            req, comp = port["ordering"]["request"], port["ordering"]["completion"]
            states.add("unknown" if req is None or comp is None else
                       "on" if req and comp else "off")  # fmt: skip
    if not states:
        return "unknown"
    return states.pop() if len(states) == 1 else "partial"


def _majority(values: list[str]) -> str | None:
    """The value more hosts share than any other; None on a tie at the top."""
    counts = Counter(values).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


def build(hosts: list[Host]) -> dict[str, Any]:
    """The report document (--format json; the table renders the same data)."""
    rows: list[dict[str, Any]] = []
    for host in hosts:
        row: dict[str, Any] = {"host": host.name, "files": host.files}
        if host.probe is not None:
            row["layout"] = _layout(host.probe)
            row["degraded_links"] = _degraded(host.probe)
            row["ido"] = _ido(host.probe)
        else:
            row["layout"] = None
            row["degraded_links"] = []
            row["ido"] = None
        if host.check is not None:
            knobs: Counter[str] = Counter(
                r["knob"] for r in host.check["rows"] if r["verdict"] != "ok"
            )
            row["check"] = {"profile": host.check["profile"], "ok": host.check["ok"],
                            "not_holding": dict(knobs)}  # fmt: skip
        else:
            row["check"] = None
        rows.append(row)

    with_layout = [r for r in rows if r["layout"] is not None]
    majority = {a: _majority([r["layout"][a] for r in with_layout]) for a in ASPECTS}
    for row in rows:
        differs = {}
        if row["layout"] is not None:
            for aspect in ASPECTS:
                if majority[aspect] is not None and row["layout"][aspect] != majority[aspect]:
                    differs[aspect] = {"host": row["layout"][aspect], "majority": majority[aspect]}
        row["layout_differs"] = differs

    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "hosts": rows,
        "majority_layout": majority,
        "drifting_hosts": [r["host"] for r in rows if r["check"] and not r["check"]["ok"]],
        "unchecked_hosts": [r["host"] for r in rows if r["check"] is None],
        "degraded_links": [{"host": r["host"], **d} for r in rows for d in r["degraded_links"]],
        "layout_outliers": [r["host"] for r in rows if r["layout_differs"]],
    }


def has_findings(report: dict[str, Any]) -> bool:
    return bool(report["drifting_hosts"] or report["degraded_links"] or report["layout_outliers"])


def describe_link(d: dict[str, Any]) -> str:
    """ "16 GT/s x16 of 32 GT/s x16"."""
    return (f"{_gts(d['current_speed_gts'])} GT/s x{d['current_width'] or '?'} of "
            f"{_gts(d['max_speed_gts'])} GT/s x{d['max_width'] or '?'}")  # fmt: skip
