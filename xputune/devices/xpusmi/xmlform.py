"""`xpu-smi -q -x`: XML, root xpu_smi_log, one `xpu` element per card keyed by bus id.

Read with the standard library's expat with the care defusedxml takes: a document that declares
entities (the billion-laughs and external-entity attacks) is refused, external entities and
DTDs are never fetched, and nesting is capped, so a hostile or broken file costs nothing. The
DOCTYPE line naming a DTD, which nvidia-smi writes and xpu-smi mirrors, is accepted.
"""

from __future__ import annotations

from xml.parsers import expat

from xputune.devices.xpusmi.cards import Tree, card_from_tree, key, lookup
from xputune.devices.xpusmi.model import SmiParseError, SmiReport
from xputune.devices.xpusmi.values import bus_id, integer, text_value

FORM = "xml"
ROOT = "xpu_smi_log"
MAX_DEPTH = 32


class _Element:
    __slots__ = ("attrs", "children", "line", "tag", "text")

    def __init__(self, tag: str, attrs: dict[str, str], line: int) -> None:
        self.tag, self.attrs, self.line = tag, attrs, line
        self.children: list[_Element] = []
        self.text: list[str] = []


def _parse_xml(text: str) -> _Element:
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[_Element] = []
    done: list[_Element] = []

    def refuse(*_args: object) -> None:
        raise SmiParseError(FORM, "entity declarations are not allowed", parser.CurrentLineNumber)

    def start(tag: str, attrs: dict[str, str]) -> None:
        if len(stack) >= MAX_DEPTH:
            raise SmiParseError(FORM, "elements nested too deep", parser.CurrentLineNumber)
        element = _Element(tag, attrs, parser.CurrentLineNumber)
        if stack:
            stack[-1].children.append(element)
        stack.append(element)

    def end(_tag: str) -> None:
        done.append(stack.pop())

    def data(chunk: str) -> None:
        if stack:
            stack[-1].text.append(chunk)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = data
    parser.EntityDeclHandler = refuse
    parser.UnparsedEntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse  # type: ignore[assignment]
    try:
        parser.Parse(text.encode("utf-8", "replace"), True)
    except expat.ExpatError as exc:
        reason = expat.errors.messages.get(exc.code, str(exc)) if exc.code else str(exc)
        raise SmiParseError(FORM, f"malformed or cut-off XML: {reason}", exc.lineno) from None
    if not done:
        raise SmiParseError(FORM, "no XML element")
    return done[-1]


def _tree(element: _Element) -> Tree:
    """Children as a key tree: leaves become text, elements with children become sections."""
    tree: Tree = {}
    for child in element.children:
        tree[key(child.tag)] = _tree(child) if child.children else "".join(child.text).strip()
    return tree


def parse(text: str) -> SmiReport:
    root = _parse_xml(text)
    if root.tag != ROOT:
        raise SmiParseError(FORM, f"root element is <{root.tag}>, expected <{ROOT}>", root.line)
    host = _tree(root)
    cards = []
    xpus = [child for child in root.children if child.tag == "xpu"]
    for index, xpu in enumerate(xpus):
        raw = xpu.attrs.get("id")
        if raw is None:
            raise SmiParseError(FORM, "an <xpu> element without its id (bus id)", xpu.line)
        canonical = bus_id(raw, FORM, "<xpu id>", xpu.line)
        cards.append(card_from_tree(_tree(xpu), FORM, index, canonical))
    attached = integer(lookup(host, "attachedxpus"), (), FORM, "<attached_xpus>")
    if attached is not None and attached != len(cards):
        raise SmiParseError(FORM, f"<attached_xpus> says {attached} but {len(cards)} <xpu> follow")
    return SmiReport(
        form=FORM, cards=tuple(cards), driver_version=text_value(lookup(host, "driverversion"))
    )
