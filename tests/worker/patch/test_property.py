"""Property: a patch rendered from the difference between two files turns the first into
exactly the second, whatever the line endings, BOM, chunk order or patch style."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from difflib import SequenceMatcher, unified_diff
from pathlib import Path

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from zodex_worker.patch import apply_patch

# No "\n"/"\r" (they end lines), no lone surrogates (not encodable), no U+FEFF (a leading
# one is indistinguishable from a BOM).
_CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="\n\r\ufeff")
_TRICKY = ["", " ", "\t", "*** End Patch", "*** End of File", "@@", "@@ x", "+", "-", "}", "EOF", "“q” —"]
ANY_LINE = st.one_of(st.text(_CHARS, max_size=10), st.sampled_from(_TRICKY))


@dataclass(frozen=True)
class Style:
    context: int  # context lines around each change
    anchors: bool  # `@@ <line before the chunk>` instead of a bare `@@`
    header_on_first: bool  # the first chunk may omit its `@@`
    eof_marker: bool  # `*** End of File` when a chunk reaches the end
    bare_blank: bool  # empty context lines inside a chunk written as bare empty lines
    reverse: bool  # chunks listed back to front (exercises out-of-order recovery)
    crlf: bool
    bom: bool
    final_newline: bool


@st.composite
def file_and_target(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    # Original lines are unique so each chunk has exactly one place: the property is
    # about applying, not about choosing between repeated blocks.
    original = draw(st.lists(ANY_LINE, unique=True, max_size=30))
    target = list(original)
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        new_lines = draw(st.lists(ANY_LINE, min_size=1, max_size=3))
        if kind == "insert" or not target:
            at = draw(st.integers(0, len(target)))
            target[at:at] = new_lines
            continue
        at = draw(st.integers(0, len(target) - 1))
        size = draw(st.integers(1, 3))
        target[at : at + size] = [] if kind == "delete" else new_lines
    return original, target


def render_patch(path: str, old: list[str], new: list[str], style: Style) -> str:
    groups = list(SequenceMatcher(None, old, new, autojunk=False).get_grouped_opcodes(style.context))
    chunks: list[list[str]] = []
    for number, group in enumerate(groups):
        first_old = group[0][1]
        lines: list[str] = []
        if number > 0 or style.header_on_first or style.reverse:
            anchor = old[first_old - 1] if style.anchors and first_old > 0 else None
            lines.append("@@" if anchor is None else f"@@ {anchor}")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(" " + text for text in old[i1:i2])
                continue
            lines.extend("-" + text for text in old[i1:i2])
            lines.extend("+" + text for text in new[j1:j2])
        if style.bare_blank:
            # Only inside the chunk: trailing bare blank lines are ambiguous by the grammar
            # (context or spacing before the next chunk), and the engine may read them as
            # spacing.
            last_content = max(i for i, line in enumerate(lines) if line != " ")
            lines = ["" if (line == " " and 0 < i < last_content) else line for i, line in enumerate(lines)]
        if style.eof_marker and group[-1][2] == len(old):
            lines.append("*** End of File")
        chunks.append(lines)
    if style.reverse:
        chunks.reverse()
    body = [line for chunk in chunks for line in chunk]
    return "\n".join(["*** Begin Patch", f"*** Update File: {path}", *body, "*** End Patch"])


def encode(lines: list[str], *, crlf: bool, bom: bool, final_newline: bool) -> bytes:
    newline = "\r\n" if crlf else "\n"
    text = newline.join(lines) + (newline if lines and final_newline else "")
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")


@settings(max_examples=200, deadline=None)
@given(
    file_and_target(),
    st.builds(
        Style,
        context=st.integers(1, 3),
        anchors=st.booleans(),
        header_on_first=st.booleans(),
        eof_marker=st.booleans(),
        bare_blank=st.booleans(),
        reverse=st.booleans(),
        crlf=st.booleans(),
        bom=st.booleans(),
        final_newline=st.booleans(),
    ),
)
def test_rendered_patch_reproduces_target(files: tuple[list[str], list[str]], style: Style) -> None:
    old, new = files
    assume(old != new)
    # Without a final newline a trailing empty line does not exist ("a\n" is ["a"]), so
    # leave the final newline off only when the last line has text.
    final_newline = style.final_newline or (bool(old) and old[-1] == "")
    original = encode(old, crlf=style.crlf, bom=style.bom, final_newline=final_newline)
    # A file without any newline cannot be told apart from LF, so it comes back as LF.
    keeps_crlf = style.crlf and b"\n" in original
    expected = encode(new, crlf=keeps_crlf, bom=style.bom, final_newline=True)
    with tempfile.TemporaryDirectory() as workdir:
        path = str(Path(workdir, "f.txt"))
        Path(path).write_bytes(original)
        patch = render_patch("f.txt", old, new, style)
        outcome = apply_patch(patch, workdir)
        assert outcome.ok, f"{outcome.text}\n--- patch ---\n{patch}"
        assert Path(path).read_bytes() == expected, patch
    # The patch was rendered from difflib's opcodes, so the evidence must be difflib's diff.
    (evidence,) = outcome.files
    assert evidence.diff == tuple(unified_diff(old, new, path, path, lineterm=""))
    codes = SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    assert evidence.added == sum(j2 - j1 for tag, _, _, j1, j2 in codes if tag != "equal")
    assert evidence.removed == sum(i2 - i1 for tag, i1, i2, _, _ in codes if tag != "equal")
