"""docs/github.md#config lists exactly the code's [github] keys, with their defaults."""

from __future__ import annotations

import re
from pathlib import Path

from zodex_gateway.sprite.github.config import GITHUB_KEYS

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_github_keys_in_docs_are_the_codes_with_their_defaults() -> None:
    text = (DOCS / "github.md").read_text()
    section = text.split("\n## Config\n", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `github\.([a-z][a-z-]*)` \| ([^|]+) \|", section, re.MULTILINE))
    assert set(rows) == set(GITHUB_KEYS)
    for leaf, (_kind, default, _about) in GITHUB_KEYS.items():
        assert rows[leaf].strip().strip("`") == ("—" if default is None else str(default)), leaf


def test_every_github_key_named_in_docs_exists() -> None:
    named = {
        token
        for page in DOCS.glob("*.md")
        for token in re.findall(r"`github\.([a-z][a-z-]*)`", page.read_text())
        if token != "com"  # github.com, the host
    }
    assert named and named - set(GITHUB_KEYS) == set()
