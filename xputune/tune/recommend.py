"""`xputune recommend`: pick the profile whose match rules fit the probed host best.

Like TuneD's recommend, but every candidate is scored and the reasons are shown, so the choice
can be checked. A profile is eligible when every rule it states holds; the score counts how
specific the rules are (card IDs say more than a vendor name), so the Hygon + P800 profile beats
the any-CPU P800 profile on the seed box, and the generic one (no rules) is the fallback.
"""

from __future__ import annotations

from dataclasses import dataclass

from xputune.topology.model import Topology
from xputune.tune.profiles import Match, Profile

WEIGHTS = {"card_ids": 8, "card_model": 4, "card_vendor": 2, "cpu_vendor": 3, "min_cards": 1}


@dataclass(frozen=True)
class Candidate:
    profile: Profile
    eligible: bool
    score: int
    reasons: tuple[str, ...]  # rules that held, or the first one that did not


def card_ids(topology: Topology) -> list[tuple[int, int]]:
    ids = []
    for card in topology.cards:
        fn = topology.pci.get(card.bdf)
        if fn is not None:
            ids.append((fn.vendor_id, fn.device_id))
    return ids


def score(match: Match, topology: Topology) -> tuple[bool, int, tuple[str, ...]]:
    """(eligible, score, reasons) of one profile's rules against the host."""
    held: list[str] = []
    total = 0
    cards = topology.cards
    checks = []
    if match.cpu_vendor:
        checks.append(
            (
                "cpu_vendor",
                topology.cpu.vendor in match.cpu_vendor,
                f"cpu vendor {topology.cpu.vendor}",
            )
        )
    if match.card_vendor:
        vendors = sorted({c.vendor for c in cards})
        checks.append(
            (
                "card_vendor",
                any(v in match.card_vendor for v in vendors),
                f"card vendor {', '.join(vendors) or 'none'}",
            )
        )
    if match.card_model:
        models = sorted({c.model for c in cards})
        checks.append(
            (
                "card_model",
                any(m in match.card_model for m in models),
                f"card model {', '.join(models) or 'none'}",
            )
        )
    if match.card_ids:
        ids = sorted(set(card_ids(topology)))
        shown = ", ".join(f"{v:04x}:{d:04x}" for v, d in ids) or "none"
        checks.append(("card_ids", any(i in match.card_ids for i in ids), f"card ids {shown}"))
    if match.min_cards:
        checks.append(
            (
                "min_cards",
                len(cards) >= match.min_cards,
                f"{len(cards)} cards (needs {match.min_cards}+)",
            )
        )
    for rule, ok, text in checks:
        if not ok:
            return False, 0, (f"no: {text}",)
        held.append(text)
        total += WEIGHTS[rule]
    return True, total, tuple(held) or ("no match rules: fits any host",)


def rank(profiles: list[Profile], topology: Topology) -> list[Candidate]:
    """All profiles, best first: eligible before not, then by score, then by name."""
    out = []
    for profile in profiles:
        eligible, points, reasons = score(profile.match, topology)
        out.append(Candidate(profile, eligible, points, reasons))
    return sorted(out, key=lambda c: (not c.eligible, -c.score, c.profile.name))


def recommend(profiles: list[Profile], topology: Topology) -> Candidate | None:
    ranked = rank(profiles, topology)
    return ranked[0] if ranked and ranked[0].eligible else None


def document(host: str, ranked: list) -> dict:
    """`xputune recommend --format json` (schema "recommend"): every candidate, best first."""
    best = ranked[0] if ranked and ranked[0].eligible else None
    return {
        "schema_version": 1,
        "host": host,
        "recommended": best.profile.name if best else None,
        "candidates": [
            {
                "profile": c.profile.name,
                "eligible": c.eligible,
                "score": c.score,
                "reasons": list(c.reasons),
            }
            for c in ranked
        ],
    }
