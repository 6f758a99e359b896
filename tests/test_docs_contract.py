"""docs/ is the contract: every reference to it resolves, and its config keys are the code's.

See docs/README.md#references for the reference form checked here.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

from zodex_gateway.config.settings import KEYS
from zodex_protocol.limits import Limits

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".js", ".css", ".html", ".txt", ".cfg"}
REFERENCE = re.compile(r"(?<![\w./-])docs/([\w./-]+?\.md)(?:#([\w-]+))?")
MD_LINK = re.compile(r"\]\(([^)\s]*)\)")
# Words that once pointed at a contract kept outside the repository.
OUTSIDE = re.compile(r"\bSPEC\b|SPEC\.md|ARCHITECTURE\.md|STYLE\.md|\.\./shared\b")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not (match := re.match(r"#{1,6} (.+)", line)):
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def tracked_text_files() -> Iterator[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in listed:
        path = ROOT / name
        if path.suffix in TEXT_SUFFIXES and path.is_file():
            yield path


def broken(page: str, anchor: str | None) -> str | None:
    target = DOCS / page
    if not target.is_file():
        return f"no page docs/{page}"
    if anchor and anchor not in anchors(target):
        return f"no section #{anchor} in docs/{page}"
    return None


def test_every_reference_to_docs_resolves() -> None:
    problems = []
    for path in tracked_text_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in REFERENCE.finditer(line):
                if (why := broken(match.group(1), match.group(2))) is not None:
                    problems.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)}: {why}")
    assert not problems, "\n".join(problems)


def test_links_between_doc_pages_resolve() -> None:
    problems = []
    for page in sorted(DOCS.glob("*.md")):
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for target in MD_LINK.findall(line):
                if target.startswith(("http://", "https://", "../")):
                    continue
                name, _, anchor = target.partition("#")
                if not name.endswith(".md") and name:
                    continue
                why = broken(name or page.name, anchor or None)
                if why is not None:
                    problems.append(f"docs/{page.name}:{number}: ({target}): {why}")
    assert not problems, "\n".join(problems)


def test_nothing_refers_to_a_contract_outside_the_repository() -> None:
    me = Path(__file__).resolve()
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in tracked_text_files()
        if path.resolve() != me
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "\n".join(hits)


def documented_keys() -> set[str]:
    text = (DOCS / "config.md").read_text()
    section = text.split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z][a-z-]*\.[a-z][a-z-]*)` \|", section, re.MULTILINE))


def test_config_keys_in_docs_are_the_codes() -> None:
    documented = documented_keys()
    assert documented, "docs/config.md#keys lists no key"
    assert documented - set(KEYS) == set(), "documented but not in the code"
    assert set(KEYS) - documented == set(), "in the code but not in docs/config.md#keys"


def test_config_keys_named_anywhere_in_docs_exist() -> None:
    tables = {name.split(".")[0] for name in KEYS}
    named = set()
    for page in DOCS.glob("*.md"):
        for token in re.findall(r"`([a-z]+\.[a-z][a-z-]*)`", page.read_text()):
            if token.split(".")[0] in tables:
                named.add(token)
    assert named - set(KEYS) == set()


def test_every_limit_the_code_enforces_has_a_documented_key() -> None:
    keyed = {key.limits_field for key in KEYS.values()}
    assert {f.name for f in fields(Limits)} - keyed == set()


def test_documented_defaults_match_the_code() -> None:
    from zodex_gateway.config.settings import format_value

    text = (DOCS / "config.md").read_text()
    for name, key in KEYS.items():
        row = re.search(rf"^\| `{re.escape(name)}` \| ([^|]+) \|", text, re.MULTILINE)
        assert row is not None, name
        shown = row.group(1).strip().strip("`")
        expected = "—" if key.default is None else format_value(name, key.default)
        assert shown == expected, f"{name}: docs say {shown}, code says {expected}"


def documented_sprite_keys() -> dict[str, str]:
    """``sprite.*`` keys in docs/sprite.md#config with the default shown."""
    text = (DOCS / "sprite.md").read_text()
    section = text.split("\n## Config\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(sprite\.[a-z][a-z-]*)` \| ([^|]+) \|", section, re.MULTILINE)
    return {name: shown.strip().strip("`") for name, shown in rows}


def test_sprite_keys_in_docs_are_the_codes_with_their_defaults() -> None:
    from zodex_gateway.sprite.settings import SPRITE_KEYS

    documented = documented_sprite_keys()
    assert documented, "docs/sprite.md#config lists no key"
    assert set(documented) - set(SPRITE_KEYS) == set(), "documented but not in the code"
    assert set(SPRITE_KEYS) - set(documented) == set(), "in the code but not in docs/sprite.md#config"
    for name, key in SPRITE_KEYS.items():
        expected = "—" if key.default is None else str(key.default)
        assert documented[name] == expected, f"{name}: docs say {documented[name]}, code says {expected}"


def test_sprite_keys_named_anywhere_in_docs_exist() -> None:
    from zodex_gateway.sprite.settings import SPRITE_KEYS

    files = {"log", "json", "toml", "service", "md"}  # `sprite.log` is a file, not a key
    named = {
        token
        for page in DOCS.glob("*.md")
        for token in re.findall(r"`(sprite\.[a-z][a-z-]*)`", page.read_text())
        if token.split(".")[1] not in files
    }
    assert named, "no sprite.* key named in docs"
    assert named - set(SPRITE_KEYS) == set()
