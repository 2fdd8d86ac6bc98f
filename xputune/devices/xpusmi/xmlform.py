"""`-q -x`: XML, root xpu_smi_log (xpu-smi) or nvidia_smi_log (nvidia-smi), one card element each.

Streamed: expat reads the document in chunks and only the card element being read is held (as
a small key tree, see cards.py), so a 50 MB document costs about what one card costs, not a
DOM of the whole file. Text per element is capped, nesting is capped, and a document that
declares entities (billion laughs, external entities) is refused outright, as defusedxml
would; DTDs are never fetched (the DOCTYPE line naming one, which both tools write, is fine).
A document cut off or broken after some complete cards keeps those cards, with a warning.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from xml.parsers import expat

from xputune.devices.xpusmi.cards import Tree, card_from_tree, key, lookup
from xputune.devices.xpusmi.model import SmiCard, SmiParseError, SmiReport
from xputune.devices.xpusmi.values import Notes, bus_id, integer, version

FORM = "xml"
ROOTS = {"xpu_smi_log": ("kunlunxin", "xpu"), "nvidia_smi_log": ("nvidia", "gpu")}
MAX_DEPTH = 32
MAX_TEXT = 4096  # characters kept per element: far above any real value
CHUNK = 1 << 20


class _Refused(Exception):
    """An entity declaration: stop at once, whatever was read."""


class _Reader:
    """expat callbacks that build one card's tree at a time."""

    def __init__(self, notes: Notes) -> None:
        self.notes = notes
        self.parser = expat.ParserCreate()
        self.parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        self.depth = 0
        self.root: str | None = None
        self.card_tag: str | None = None
        self.host: Tree = {}
        self.cards: list[SmiCard] = []
        self.stack: list[tuple[str, Tree, list[str]]] = []  # inside a card: (tag, tree, text)
        self.card_attrs: dict[str, str] = {}
        self.card_line = 0
        self.host_text: list[str] = []  # text of the host-level element being read
        p = self.parser
        p.StartElementHandler = self.start
        p.EndElementHandler = self.end
        p.CharacterDataHandler = self.data
        p.EntityDeclHandler = self.refuse
        p.UnparsedEntityDeclHandler = self.refuse
        p.ExternalEntityRefHandler = self.refuse  # type: ignore[assignment]

    def refuse(self, *_args: object) -> None:
        raise _Refused

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SmiParseError(FORM, "elements nested too deep", self.parser.CurrentLineNumber)
        if self.depth == 1:
            if tag not in ROOTS:
                expected = " or ".join(f"<{r}>" for r in ROOTS)
                raise SmiParseError(FORM, f"root element is <{tag}>, expected {expected}", 1)
            self.root, self.card_tag = tag, ROOTS[tag][1]
            return
        if self.depth == 2 and tag == self.card_tag:
            self.card_attrs, self.card_line = attrs, self.parser.CurrentLineNumber
            self.stack = [(tag, {}, [])]
            return
        if self.stack:
            self.stack.append((tag, {}, []))
        elif self.depth == 2:
            self.host_text = []

    def data(self, chunk: str) -> None:
        if self.stack:
            text = self.stack[-1][2]
            if sum(map(len, text)) < MAX_TEXT:
                text.append(chunk)
        elif self.depth == 2 and len(self.host_text) < 64:
            self.host_text.append(chunk)

    def end(self, tag: str) -> None:
        self.depth -= 1
        if self.stack:
            name, tree, text = self.stack.pop()
            if self.stack:
                parent = self.stack[-1][1]
                parent[key(name)] = tree if tree else "".join(text).strip()[:MAX_TEXT]
            else:
                self.card_done(tree)
        elif self.depth == 1:
            self.host[key(tag)] = "".join(self.host_text).strip()[:MAX_TEXT]
            self.host_text = []

    def card_done(self, tree: Tree) -> None:
        raw = self.card_attrs.get("id")
        index = len(self.cards)
        if raw is None:
            self.notes.add(f"smi -q -x output: card {index} without its id (bus id)")
            canonical = None
        else:
            canonical = self.notes.soft(bus_id, raw, FORM, f"<{self.card_tag} id>", self.card_line)
        self.cards.append(card_from_tree(tree, FORM, index, canonical, self.notes))


def parse_chunks(chunks: Iterable[bytes]) -> SmiReport:
    """The report in an XML document given as byte chunks (read lazily, never all at once)."""
    notes = Notes()
    reader = _Reader(notes)
    try:
        for chunk in chunks:
            reader.parser.Parse(chunk, False)
        reader.parser.Parse(b"", True)
    except _Refused:
        raise SmiParseError(
            FORM, "entity declarations are not allowed", reader.parser.CurrentLineNumber
        ) from None
    except expat.ExpatError as exc:
        reason = expat.errors.messages.get(exc.code, str(exc)) if exc.code else str(exc)
        if not reader.cards:
            raise SmiParseError(FORM, f"malformed or cut-off XML: {reason}", exc.lineno) from None
        notes.add(
            f"smi -q -x output: malformed or cut-off XML at line {exc.lineno} ({reason}); "
            f"kept the {len(reader.cards)} complete card(s) before it"
        )
    if reader.root is None:
        raise SmiParseError(FORM, "no XML element")
    vendor = ROOTS[reader.root][0]
    attached = notes.soft(
        integer, lookup(reader.host, "attachedxpus", "attachedgpus"), (), FORM, "attached count"
    )
    if attached is not None and attached != len(reader.cards):
        notes.add(
            f"smi -q -x output: attached count says {attached} but {len(reader.cards)} "
            "card element(s) follow"
        )
    if not reader.cards and attached is None and not reader.host:
        raise SmiParseError(FORM, f"<{reader.root}> holds no card and no driver version")
    return SmiReport(
        form=FORM,
        cards=tuple(reader.cards),
        driver_version=notes.soft(
            version, lookup(reader.host, "kmdversion", "driverversion"), FORM, "driver version"
        ),
        vendor=vendor,
        warnings=notes.done(),
    )


def _pieces(data: bytes) -> Iterator[bytes]:
    for at in range(0, len(data), CHUNK):
        yield data[at : at + CHUNK]


def parse(text: str) -> SmiReport:
    return parse_chunks(_pieces(text.encode("utf-8", "replace")))
