from pathlib import Path

from xputune.cli.manpages import render_all

MAN = Path(__file__).resolve().parents[2] / "man"


def test_man_pages_match_the_cli() -> None:
    pages = render_all()
    on_disk = {p.name: p.read_text() for p in MAN.glob("*.1")}
    stale = sorted(n for n in pages if on_disk.get(n) != pages[n])
    extra = sorted(set(on_disk) - set(pages))
    assert not stale and not extra, (
        f"man/ is out of date (stale: {stale}, extra: {extra}); "
        "run: python -m xputune.cli.manpages man"
    )
    assert "xputune-probe.1" in pages and ".SH OPTIONS" in pages["xputune-probe.1"]
