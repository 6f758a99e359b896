"""Parse a Codex-style patch (docs/apply_patch.md#format) into file operations.

The parser is all-or-nothing: any malformed line rejects the whole patch before a file
is touched. It accepts what Codex accepts (whitespace around markers and headers, a
`<<EOF` heredoc wrapper, blank lines between chunks, CRLF) plus two harmless extras that
are documented in docs/apply_patch.md: several `@@` anchors in a row (nested anchors, as
Codex's own instructions describe) and `*** End of File` closing an Add File body.
"""

from __future__ import annotations

import os

from .model import AddFile, Chunk, DeleteFile, ItemKind, Operation, PatchSyntaxError, UpdateFile

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File:"
DELETE = "*** Delete File:"
UPDATE = "*** Update File:"
MOVE = "*** Move to:"
END_OF_FILE = "*** End of File"
HEREDOC_OPENERS = ("<<EOF", "<<'EOF'", '<<"EOF"')
HEREDOC_CLOSER = "EOF"

_VALID_HEADERS = "'*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'"
_CHUNK_LINE_RULE = (
    "Every line should start with ' ' (context line), '+' (added line), '-' (removed line) "
    "or '@@' (chunk header)"
)


def parse_patch(text: str) -> tuple[Operation, ...]:
    """Return the patch's operations or raise :class:`PatchSyntaxError`."""
    # Split on LF only: str.splitlines() would also split on form feeds and U+2028,
    # which are ordinary characters inside a source line.
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    first, last = _boundaries(lines)
    return _BodyParser(lines, first + 1, last).parse()


def _boundaries(lines: list[str]) -> tuple[int, int]:
    """Indexes of the Begin and End lines, after peeling an optional heredoc wrapper."""
    first, last = _first_nonblank(lines, 0, len(lines)), _last_nonblank(lines, 0, len(lines))
    if first is None or last is None:
        raise PatchSyntaxError("Invalid patch: the patch is empty; it must start with '*** Begin Patch'")
    if lines[first].strip() in HEREDOC_OPENERS:
        opener = lines[first].strip()
        if last == first or lines[last].strip() != HEREDOC_CLOSER:
            raise PatchSyntaxError(
                f"Invalid patch: the heredoc wrapper {opener!r} on line {first + 1} is not closed by "
                f"a final 'EOF' line (line {last + 1} is {lines[last]!r})"
            )
        inner_first = _first_nonblank(lines, first + 1, last)
        inner_last = _last_nonblank(lines, first + 1, last)
        if inner_first is None or inner_last is None:
            raise PatchSyntaxError(
                f"Invalid patch: the heredoc wrapper on lines {first + 1}-{last + 1} contains no patch"
            )
        first, last = inner_first, inner_last
    if lines[first].strip() != BEGIN:
        raise PatchSyntaxError(
            f"Invalid patch: The first line of the patch must be '{BEGIN}' (line {first + 1} is "
            f"{lines[first]!r})"
        )
    if last == first or lines[last].strip() != END:
        raise PatchSyntaxError(
            f"Invalid patch: The last line of the patch must be '{END}' (line {last + 1} is {lines[last]!r})"
        )
    return first, last


def _first_nonblank(lines: list[str], start: int, stop: int) -> int | None:
    return next((i for i in range(start, stop) if lines[i].strip()), None)


def _last_nonblank(lines: list[str], start: int, stop: int) -> int | None:
    return next((i for i in range(stop - 1, start - 1, -1) if lines[i].strip()), None)


def _is_blank(line: str) -> bool:
    return not line.strip()


def _hunk_error(index: int, message: str) -> PatchSyntaxError:
    return PatchSyntaxError(f"Invalid patch hunk on line {index + 1}: {message}")


class _ChunkBuilder:
    """Collects one chunk's lines; knows where it started for error messages."""

    def __init__(self, line_index: int, contexts: list[str]) -> None:
        self.line_index = line_index
        self.contexts = contexts
        self.items: list[tuple[ItemKind, str]] = []
        self.trailing_blanks = 0

    def add(self, kind: ItemKind, text: str, *, bare_blank: bool = False) -> None:
        self.items.append((kind, text))
        self.trailing_blanks = self.trailing_blanks + 1 if bare_blank else 0

    def has_lines(self) -> bool:
        # Bare blank lines alone are spacing, not content.
        return len(self.items) > self.trailing_blanks

    def build(self, eof: bool) -> Chunk:
        if not self.has_lines():
            raise _hunk_error(self.line_index, "Update hunk does not contain any lines")
        return Chunk(
            contexts=tuple(self.contexts),
            items=tuple(self.items),
            eof=eof,
            line=self.line_index + 1,
            trailing_blanks=self.trailing_blanks,
        )


class _BodyParser:
    """Parses the lines strictly between Begin and End (indexes ``start``..``stop``)."""

    def __init__(self, lines: list[str], start: int, stop: int) -> None:
        self.lines = lines
        self.start = start
        self.stop = stop

    def parse(self) -> tuple[Operation, ...]:
        ops: list[Operation] = []
        i = self.start
        while i < self.stop:
            line = self.lines[i]
            if _is_blank(line):
                i += 1
                continue
            header = line.strip()
            if header.startswith(ADD):
                op_add, i = self._add_file(i, self._path(i, header, ADD))
                ops.append(op_add)
            elif header.startswith(DELETE):
                ops.append(DeleteFile(path=self._path(i, header, DELETE), line=i + 1))
                i += 1
            elif header.startswith(UPDATE):
                op_update, i = self._update_file(i, self._path(i, header, UPDATE))
                ops.append(op_update)
            else:
                raise self._bad_header(i, header)
        if not ops:
            raise PatchSyntaxError(
                f"Invalid patch: no file operations between '{BEGIN}' (line {self.start}) and "
                f"'{END}' (line {self.stop + 1})"
            )
        return tuple(ops)

    def _bad_header(self, i: int, header: str) -> PatchSyntaxError:
        if header.startswith(MOVE):
            return _hunk_error(i, f"'{MOVE}' must come right after '{UPDATE} <path>'")
        if header == END_OF_FILE:
            return _hunk_error(i, f"'{END_OF_FILE}' must follow the lines of an update chunk")
        if header in (BEGIN, END):
            return _hunk_error(i, f"unexpected {header!r} inside the patch")
        return _hunk_error(i, f"{header!r} is not a valid hunk header. Valid hunk headers: {_VALID_HEADERS}")

    @staticmethod
    def _path(i: int, header: str, marker: str) -> str:
        path = header[len(marker) :].strip()
        if not path:
            raise _hunk_error(i, f"{header!r} has no path")
        try:
            encoded = os.fsencode(path)
        except UnicodeEncodeError:
            encoded = b"\0"  # unencodable: rejected below like a NUL byte
        if b"\0" in encoded:
            # Caught here because os functions raise ValueError, not OSError, on these.
            raise _hunk_error(i, f"{path!r} is not a valid file name")
        return path

    def _add_file(self, i: int, path: str) -> tuple[AddFile, int]:
        content: list[str] = []
        j = i + 1
        while j < self.stop:
            line = self.lines[j]
            if line.startswith("+"):
                content.append(line[1:])
                j += 1
                continue
            stripped = line.strip()
            if stripped == END_OF_FILE:
                j += 1
                break
            if stripped.startswith("***"):
                break
            if _is_blank(line):
                nxt = _first_nonblank(self.lines, j, self.stop)
                if nxt is None or self.lines[nxt].strip().startswith("***"):
                    break  # spacing before the next header or the end
                raise _hunk_error(
                    j,
                    f"blank line inside the content of '{ADD} {path}'; every line of a new file "
                    "must start with '+' (write a lone '+' for an empty line)",
                )
            raise _hunk_error(
                j,
                f"unexpected line in '{ADD} {path}': {line!r}. Every line of a new file must start with '+'.",
            )
        return AddFile(path=path, lines=tuple(content), line=i + 1), j

    def _update_file(self, i: int, path: str) -> tuple[UpdateFile, int]:
        j = i + 1
        move_to: str | None = None
        if j < self.stop and self.lines[j].strip().startswith(MOVE):
            move_to = self._path(j, self.lines[j].strip(), MOVE)
            j += 1
        chunks: list[Chunk] = []
        current: _ChunkBuilder | None = None
        while j < self.stop:
            line = self.lines[j]
            # A line starting with a space is always context, even " *** End Patch".
            if not line.startswith(" ") and line.strip().startswith("***"):
                if line.strip() != END_OF_FILE:
                    break  # the next file operation; the caller validates it
                if current is None or not current.has_lines():
                    raise _hunk_error(j, f"'{END_OF_FILE}' must follow the lines of an update chunk")
                chunks.append(current.build(eof=True))
                current = None
            elif line.rstrip() == "@@" or line.startswith("@@ "):
                context = line[3:] if line.rstrip() != "@@" else None
                if current is not None and not current.items:
                    # `@@ class A` then `@@ def f()`: nested anchors for one chunk.
                    if context is not None:
                        current.contexts.append(context)
                else:
                    if current is not None:
                        chunks.append(current.build(eof=False))
                    current = _ChunkBuilder(j, [context] if context is not None else [])
            elif _is_blank(line) and not line.startswith(" "):
                if current is not None:  # else: spacing between chunks
                    current.add(" ", "", bare_blank=True)
            elif line[0] in " +-":
                if current is None:
                    if chunks:  # only reachable after a chunk closed by End of File
                        raise _hunk_error(j, f"expected '@@' to start a new chunk, got {line!r}")
                    current = _ChunkBuilder(j, [])
                kind: ItemKind = " " if line[0] == " " else ("+" if line[0] == "+" else "-")
                current.add(kind, line[1:])
            else:
                raise _hunk_error(j, f"Unexpected line found in update hunk: {line!r}. {_CHUNK_LINE_RULE}")
            j += 1
        if current is not None:
            chunks.append(current.build(eof=False))
        if not chunks:
            raise _hunk_error(i, f"Update file hunk for path {path!r} is empty")
        return UpdateFile(path=path, move_to=move_to, chunks=tuple(chunks), line=i + 1), j
