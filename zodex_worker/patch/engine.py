"""apply_patch: parse, apply each file operation independently, report (docs/apply_patch.md).

Operations run in patch order and each sees the result of the ones before it, so an
Update after an Add of the same path edits the new file. A failed operation changes
nothing and does not stop the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import AddFile, DeleteFile, Operation, PatchSyntaxError, UpdateFile
from .operations import add_file, delete_file, update_file
from .outcome import FileEvidence, PatchOutcome
from .parser import parse_patch
from .tempfiles import sweep_once_per_directory
from .textfile import FileOpError, resolve

SUCCESS_HEADER = "Success. Updated the following files:"


@dataclass(frozen=True)
class _Failure:
    operation: Operation
    reason: str


def apply_patch(patch: str, workdir: str) -> PatchOutcome:
    """Apply a Codex-style patch; relative paths resolve against `workdir`.

    Synchronous and free of shared state, so the worker may call it from a thread.
    """
    try:
        operations = parse_patch(patch)
    except PatchSyntaxError as error:
        return PatchOutcome(ok=False, text=str(error), files=())
    applied: list[FileEvidence] = []
    failures: list[_Failure] = []
    with sweep_once_per_directory():
        for operation in operations:
            try:
                applied.append(_apply_one(operation, workdir))
            except FileOpError as error:
                failures.append(_Failure(operation, str(error)))
            except OSError as error:  # a file system error the operation did not anticipate
                failures.append(_Failure(operation, f"{error.strerror or error}"))
    text = _report(applied, failures, workdir, len(operations))
    return PatchOutcome(ok=not failures, text=text, files=tuple(applied))


def _apply_one(operation: Operation, workdir: str) -> FileEvidence:
    if isinstance(operation, AddFile):
        return add_file(operation, workdir)
    if isinstance(operation, DeleteFile):
        return delete_file(operation, workdir)
    return update_file(operation, workdir)


def _status_line(evidence: FileEvidence) -> str:
    letter = {"created": "A", "deleted": "D"}.get(evidence.operation, "M")
    return f"{letter} {evidence.path}"


def _status_lines(applied: list[FileEvidence]) -> list[str]:
    # Patch order; a path touched twice the same way is listed once.
    return list(dict.fromkeys(_status_line(evidence) for evidence in applied))


def _failure_text(failure: _Failure, workdir: str) -> str:
    op = failure.operation
    if isinstance(op, AddFile):
        title = f"Add File {resolve(workdir, op.path)}"
    elif isinstance(op, DeleteFile):
        title = f"Delete File {resolve(workdir, op.path)}"
    elif isinstance(op, UpdateFile) and op.move_to is not None:
        title = f"Update File {resolve(workdir, op.path)} (Move to {resolve(workdir, op.move_to)})"
    else:
        title = f"Update File {resolve(workdir, op.path)}"
    return f"{title}: {failure.reason}"


def _report(applied: list[FileEvidence], failures: list[_Failure], workdir: str, total: int) -> str:
    if not failures:
        return "\n".join([SUCCESS_HEADER, *_status_lines(applied)])
    failed = "\n\n".join(_failure_text(failure, workdir) for failure in failures)
    if not applied:
        return (
            f"apply_patch failed: 0 of {total} file operations succeeded. No files were changed.\n"
            f"Failed:\n{failed}"
        )
    changed = "\n".join(_status_lines(applied))
    return (
        f"apply_patch partially applied: {len(applied)} of {total} file operations succeeded.\n"
        f"Already changed:\n{changed}\nFailed:\n{failed}"
    )
