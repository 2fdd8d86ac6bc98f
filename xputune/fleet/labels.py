"""Node labels for the scheduler, as a feature file for Node Feature Discovery's local source.

NFD's worker reads every file in /etc/kubernetes/node-feature-discovery/features.d/ (files
whose name starts with a dot are skipped, a file over 64 KiB is refused): one `name=value` per
line, lines starting with `#` are comments, and the directive `# +expiry-time=<RFC3339>` makes
the lines after it be ignored once that time has passed (so a node whose writer died stops
advertising stale facts). Names follow NFD's label rules (pkg/apis/nfd/validate): a prefix
(NFD refuses unprefixed names and the kubernetes.io namespaces other than its own), here
`xputune.io/`, then a name of at most 63 characters, alphanumerics with `-`, `_` and `.`
inside; a value likewise at most 63 characters from the same set (or empty).
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

from xputune.fleet.judge import Judgement
from xputune.topology.model import Topology

PREFIX = "xputune.io/"
FILE_NAME = "xputune"
MAX_FILE_BYTES = 65536  # NFD's MaxFeatureFileSize
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def valid_label(key: str, value: str) -> str | None:
    """Why NFD would refuse this label (None: it is fine). Mirrors Kubernetes' checks."""
    prefix, slash, name = key.rpartition("/")
    if not slash or not prefix:
        return "unprefixed names are not allowed"
    if len(prefix) > 253 or not _PREFIX.match(prefix):
        return f"prefix {prefix!r} is not a DNS subdomain"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return f"namespace {prefix!r} is reserved"
    if len(name) > 63 or not _NAME.match(name):
        return f"name {name!r}: at most 63 alphanumerics, '-', '_' or '.' inside"
    if value and (len(value) > 63 or not _NAME.match(value)):
        return f"value {value!r}: at most 63 alphanumerics, '-', '_' or '.' inside"
    return None


def value_of(text: str) -> str:
    """Any text as a label value: other characters become '-', cut to 63, ends alphanumeric."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text.strip())[:63]
    return cleaned.strip("-_.")


def ido_state(topo: Topology) -> str:
    """on, off, partial or unknown over every port on every card's path (request and
    completion both set counts as on)."""
    states = set()
    for card in topo.cards:
        for fn in topo.ports_on_path(card):
            o = fn.ordering
            if o.ido_request is None or o.ido_completion is None:
                states.add("unknown")
            else:
                states.add("on" if o.ido_request and o.ido_completion else "off")
    if not states:
        return "unknown"
    return states.pop() if len(states) == 1 else "partial"


def recommended_strategy(topo: Topology) -> str:
    """plan's recommendation (plan/strategy.py) for a TP over every card, with no model named
    (so never shared): all-nodes where it uses idle memory and IDO allows it, else local;
    "none" without cards."""
    from xputune.plan.strategy import recommend_strategy

    return recommend_strategy(topo).strategy or "none"


def labels(topo: Topology, judgement: Judgement | None = None) -> dict[str, str]:
    """name -> value, in a stable order; every pair passes valid_label."""
    cards = topo.cards
    models = Counter(c.model for c in cards)
    vendors = Counter(c.vendor for c in cards)
    nodes = [c.numa_node for c in cards]
    per_node = Counter(n for n in nodes if n is not None)
    per_uplink = Counter(c.uplink for c in cards if c.uplink is not None)
    out: dict[str, str] = {
        "card-count": str(len(cards)),
        "card-model": value_of(models.most_common(1)[0][0]) if len(models) == 1 else "mixed",
        "card-vendor": value_of(vendors.most_common(1)[0][0]) if len(vendors) == 1 else "mixed",
        # the NUMA node of each card in bus order, e.g. 1-1-3-3-5-5-7-7 (x: unknown)
        "card-numa-nodes": "-".join("x" if n is None else str(n) for n in nodes),
        "numa-nodes-with-cards": str(len(per_node)),
        "cards-per-numa-node": _uniform(per_node.values()),
        "uplinks": str(len(per_uplink)),
        "uplink-shared": str(any(n > 1 for n in per_uplink.values())).lower(),
        "cards-per-uplink": _uniform(per_uplink.values()),
        "degraded-links": str(sum(topo.pci[c.bdf].link.degraded for c in cards)),
        "ido": ido_state(topo),
        "strategy": recommended_strategy(topo),
    }
    if not cards:
        for key in ("card-model", "card-vendor", "card-numa-nodes", "cards-per-numa-node",
                    "cards-per-uplink"):  # fmt: skip
            out.pop(key)
    if judgement is not None:
        out["profile"] = value_of(judgement.profile)
        out["profile-holds"] = str(judgement.holds).lower()
    named = {}
    for key, value in out.items():
        full = PREFIX + key
        if valid_label(full, value) is None:  # e.g. a NUMA list of 30 cards is over 63
            named[full] = value
    return named


def _uniform(counts) -> str:
    """The one count all share ("2"), or "mixed"; "0" when there is nothing."""
    seen = set(counts)
    if not seen:
        return "0"
    return str(seen.pop()) if len(seen) == 1 else "mixed"


def feature_file(
    pairs: dict[str, str], now: datetime | None = None, expiry: timedelta | None = None
) -> str:
    """The file's text: a header, the expiry directive (before every label), the labels."""
    lines = ["# Node labels from xputune (xputune labels --nfd); rewritten, do not edit."]
    if expiry is not None:
        when = (now or datetime.now(UTC)) + expiry
        stamp = when.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(f"# +expiry-time={stamp}")
    lines += [f"{k}={v}" for k, v in pairs.items()]
    text = "\n".join(lines) + "\n"
    if len(text.encode()) > MAX_FILE_BYTES:  # cannot happen with a dozen labels; be sure
        raise ValueError(f"feature file is {len(text.encode())} bytes, NFD reads {MAX_FILE_BYTES}")
    return text


def parse_feature_file(text: str, now: datetime | None = None) -> dict[str, str]:
    """Read a feature file back the way NFD's local source does (for tests and `--check`)."""
    now = now or datetime.now(UTC)
    expiry: datetime | None = None
    out: dict[str, str] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +expiry-time="):
                expiry = datetime.fromisoformat(line.split("=", 1)[1].strip())
            continue
        if expiry is not None and expiry < now:
            continue
        key, eq, value = line.partition("=")
        out[key] = value if eq else "true"
    return out
