from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zodex_gateway.context.frontmatter import parse_front_matter


def test_plain_keys_and_quotes() -> None:
    text = "---\nname: pdf-tools\ndescription: \"Read \\\"PDFs\\\" fast\"\nlicense: 'it''s MIT'\n---\nbody\n"
    assert parse_front_matter(text) == {
        "name": "pdf-tools",
        "description": 'Read "PDFs" fast',
        "license": "it's MIT",
    }


def test_folded_description() -> None:
    text = "---\nname: x\ndescription: >\n  Extracts tables\n  from PDFs.\n\n  Use for reports.\n---\n"
    assert parse_front_matter(text) == {
        "name": "x",
        "description": "Extracts tables from PDFs.\nUse for reports.",
    }


def test_literal_description_with_indicators() -> None:
    text = "---\ndescription: |-\n    first line\n    second line\nname: y\n---\n"
    assert parse_front_matter(text) == {"description": "first line\nsecond line", "name": "y"}


def test_plain_multiline_and_comments() -> None:
    text = "---\n# a comment\ndescription: one # trailing comment\n  two\nname: C# tools\n---\n"
    assert parse_front_matter(text) == {"description": "one two", "name": "C# tools"}


def test_nested_mapping_and_lists_do_not_leak_keys() -> None:
    text = "---\nmetadata:\n  name: inner\ntags:\n- a\n- b\nname: outer\n---\n"
    fields = parse_front_matter(text)
    assert fields is not None
    assert fields["name"] == "outer"
    assert "a" not in fields


def test_crlf_and_bom() -> None:
    assert parse_front_matter("\ufeff---\r\nname: w\r\n---\r\n") == {"name": "w"}


def test_no_front_matter() -> None:
    assert parse_front_matter("# Title\nname: x\n") is None
    assert parse_front_matter("") is None
    assert parse_front_matter("---\nname: never closed\n") is None


def test_unterminated_quote_keeps_text() -> None:
    assert parse_front_matter('---\ndescription: "half\n---\n') == {"description": "half"}


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_any_text(body: str) -> None:
    result = parse_front_matter("---\n" + body + "\n---\n")
    assert result is not None
    assert all(isinstance(value, str) for value in result.values())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["name:", " ", ">", "|", "'", '"', "\\", "#", "\n", "  x", "---", "a: b", "-"]),
        max_size=40,
    )
)
def test_never_raises_on_yaml_like_noise(pieces: list[str]) -> None:
    parse_front_matter("---\n" + "".join(pieces))
