"""Liveboard's ``contract.js`` names what the observer sends, once for every module: each
value there equals the Python that sends it and docs/observer.md, so a rename on either side
fails here instead of leaving a board that silently ignores what it no longer recognises."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from zodex_gateway.agents.alias import MAX_ALIAS_CHARS
from zodex_gateway.history import ERROR, INCOMPLETE, NO_AGENT, OK, PENDING
from zodex_gateway.history.records import PROCESS_LOST
from zodex_gateway.mcp.tools import SESSION_RESULT
from zodex_gateway.observer.hub import EVENT_TYPES
from zodex_gateway.observer.paging import MAX_LIMIT
from zodex_gateway.viewers.liveboard import STATIC_DIR
from zodex_worker.patch.outcome import Operation

ROOT = Path(__file__).resolve().parents[4]
CONTRACT = (STATIC_DIR / "contract.js").read_text()
OBSERVER_DOC = (ROOT / "docs" / "observer.md").read_text()


def js_names(name: str) -> dict[str, str]:
    """The table of ``export const NAME = namedByValue('value', …);``: each value under its
    name in capitals, as the module builds it (test_liveboard_modules.py checks it does)."""
    found = re.search(rf"^export const {name} = namedByValue\((.*?)\);$", CONTRACT, re.M | re.S)
    assert found is not None, f"contract.js has no table {name}"
    items = [item.strip() for item in found.group(1).split(",") if item.strip()]
    values = [re.fullmatch(r"'([a-z_]+)'", item) for item in items]
    assert all(values), f"{name}: every value must be a quoted lower-case name: {items}"
    return {value.group(1).upper(): value.group(1) for value in values if value}


def js_tables() -> list[str]:
    return re.findall(r"^export const (\w+) = namedByValue\(", CONTRACT, re.M)


def js_number(name: str) -> int:
    found = re.search(rf"^export const {name} = (\d+);$", CONTRACT, re.M)
    assert found is not None, f"contract.js has no number {name}"
    return int(found.group(1))


def documented(section: str) -> str:
    """The text of docs/observer.md under the heading ``section`` (up to the next one)."""
    return OBSERVER_DOC.split(f"\n{section}\n", 1)[1].split("\n#", 1)[0]


def spelled(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", text))


def test_every_table_is_read() -> None:
    assert js_tables() == ["EVENT", "KIND", "COMMAND_STATUS", "TERMINATION", "CALL_STATUS", "OPERATION", "BY"]
    for name in js_tables():
        assert js_names(name), f"{name} names nothing"


def test_event_types_are_the_hubs_and_the_docs() -> None:
    events = set(js_names("EVENT").values())
    assert events == set(EVENT_TYPES)
    table = documented("## Events (`GET /v1/events`)").split("| event_type | payload |", 1)[1]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    assert set().union(*map(spelled, rows)) == events


def test_record_fields_are_the_documented_ones() -> None:
    records = documented("### Timeline records")
    kinds = set(re.findall(r"^- `([a-z_]+)` —", records, re.M))
    assert set(js_names("KIND").values()) == kinds
    command_status = re.search(r"`status` \(([^)]*)\)", records)
    assert command_status is not None
    assert set(js_names("COMMAND_STATUS").values()) == spelled(command_status.group(1))
    reasons = re.search(r"`termination_reason`\s+\(([^;]*);", records)
    assert reasons is not None
    assert set(js_names("TERMINATION").values()) == spelled(reasons.group(1))
    call_status = re.search(r"its call's `status`: (.*?) \(", records, re.S)
    assert call_status is not None
    assert set(js_names("CALL_STATUS").values()) == spelled(call_status.group(1))
    operations = re.search(r"\{operation\s+\(([a-z|]+)\)", records)
    assert operations is not None
    assert set(js_names("OPERATION").values()) == set(operations.group(1).split("|"))


def test_record_fields_are_what_the_python_sends() -> None:
    fields = SESSION_RESULT["properties"]
    assert set(js_names("COMMAND_STATUS").values()) == set(fields["status"]["enum"])
    ended = {*fields["termination_reason"]["enum"], PROCESS_LOST}  # lost: history's own ending
    assert set(js_names("TERMINATION").values()) == ended
    assert set(js_names("CALL_STATUS").values()) == {PENDING, OK, ERROR, INCOMPLETE}
    assert set(js_names("OPERATION").values()) == set(typing.get_args(Operation))


def js_string(name: str) -> str:
    found = re.search(rf"^export const {name} = '([a-z_]+)';$", CONTRACT, re.M)
    assert found is not None, f"contract.js has no string {name}"
    return found.group(1)


def test_the_unattributed_filter_word_is_historys_and_the_docs() -> None:
    assert js_string("NO_AGENT") == NO_AGENT
    unattributed = " ".join(documented("### Unattributed calls").split())
    assert f"the word `{NO_AGENT}` selects exactly the calls with no agent" in unattributed


def test_limits_are_the_observers() -> None:
    assert js_number("MAX_PAGE_RECORDS") == MAX_LIMIT
    assert js_number("MAX_ALIAS_CHARS") == MAX_ALIAS_CHARS


def test_no_other_module_spells_the_contracts_names() -> None:
    """A name of two words or more means only what contract.js names; one word (output,
    command) is also a CSS class or a store event, so it is not looked for."""
    names = {value for block in js_tables() for value in js_names(block).values() if "_" in value}
    assert names, "contract.js names nothing of two words"
    found = [
        f"{module.name}: '{name}'"
        for module in sorted(STATIC_DIR.glob("*.js"))
        if module.name != "contract.js"
        for name in names
        if f"'{name}'" in module.read_text()
    ]
    assert not found, "spell these through contract.js:\n" + "\n".join(found)
