"""Benchmark: `xputune smi --input FILE --format json` on a 50 MB `xpu-smi -q -x` document.

The XML form is streamed (devices/xpusmi/xmlform.py), so peak memory should stay near the
interpreter's own plus the cards' records, not grow with a DOM of the file. This writes a
document of SIZE_MB made of copies of a real card element (tests/devices/data/real, telegraf's
P800 sample) with distinct bus ids, runs the CLI in a subprocess, and prints wall time and the
child's peak RSS (ru_maxrss). Not a test: run it by hand.

    .venv/bin/python tests/bench/bench_smi_xml.py [SIZE_MB]
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "devices" / "data" / "real" / "xpusmi-q-x-telegraf-p800-oam-8.xml"


def write_document(path: Path, size_mb: int) -> int:
    """A `-q -x` document of about size_mb MiB; returns its card count."""
    text = SAMPLE.read_text()
    card = re.search(r"        <xpu id=.*?</xpu>\n", text, re.S)
    assert card is not None
    template = card[0].replace("00000000:03:00.0", "{bus}")
    count = 0
    with path.open("w") as out:
        out.write(
            '<?xml version="1.0" ?>\n<xpu_smi_log>\n<driver_version>5.19.0.0</driver_version>\n'
        )
        while out.tell() < size_mb << 20:
            domain, bus = divmod(count, 256)
            out.write(template.replace("{bus}", f"{domain:08X}:{bus:02X}:00.0"))
            count += 1
        out.write("</xpu_smi_log>\n")
    return count


def main() -> None:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    with tempfile.TemporaryDirectory() as tmp:
        doc = Path(tmp) / "big.xml"
        cards = write_document(doc, size_mb)
        cmd = [sys.executable, "-m", "xputune", "smi", "--input", str(doc), "--format", "json"]
        start = time.perf_counter()
        with open(os.devnull, "wb") as sink:
            done = subprocess.run(cmd, stdout=sink, stderr=subprocess.PIPE, cwd=ROOT, check=False)
        wall = time.perf_counter() - start
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(
            f"document {doc.stat().st_size / (1 << 20):.1f} MiB, {cards} cards: exit "
            f"{done.returncode}, {wall:.2f} s, peak RSS {peak_kib / 1024:.0f} MiB"
        )
        if done.returncode:
            print(done.stderr.decode(errors="replace"))


if __name__ == "__main__":
    main()
