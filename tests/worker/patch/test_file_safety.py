"""What apply_patch shows and leaves to other local users (docs/apply_patch.md#files,
docs/security.md#second-local-user): temporary files, owners, setuid bits, read-only files.

The second user is ``nobody`` (tests/support/second_user.py); these tests need root.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.second_user import (
    hand_to_second_user,
    require_second_user,
    run_as_second_user,
    second_user_ids,
    second_user_python,
)
from zodex_system import proctree
from zodex_worker.patch import apply_patch

PROJECT_ROOT = Path(__file__).resolve().parents[3]
SECRET = "s3cret-" * 20


def _patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"])


def _temps(directory: Path) -> list[Path]:
    return sorted(directory.glob(".*.zodex-tmp"))


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another owner needs root")


# A writer killed mid-write: the child lets SIGXFSZ kill it (Python ignores it by default)
# when its write crosses RLIMIT_FSIZE, so the death lands inside the write, every time.
_KILLED_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    from zodex_worker.patch import apply_patch
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    apply_patch(sys.stdin.read(), sys.argv[1])
    """
)


def test_a_killed_writer_leaves_a_private_temp_file_that_the_next_patch_removes(
    second_user_tree: Path,
) -> None:
    require_second_user()
    secret = second_user_tree / "secret.txt"
    secret.write_text("old\n")
    secret.chmod(0o600)
    body = [f"+{SECRET}"] * 400  # ~56 KB, far past the 4 KB the writer may write
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(second_user_tree)],
        input=_patch("*** Update File: secret.txt", "@@", "-old", *body),
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    assert child.returncode == -signal.SIGXFSZ, child.stderr
    [leftover] = _temps(second_user_tree)
    assert leftover.stat().st_size == 4096  # really cut mid-write
    assert stat.S_IMODE(leftover.stat().st_mode) == 0o600
    peek = run_as_second_user(["cat", str(leftover)])
    assert peek.returncode != 0 and SECRET not in peek.stdout
    assert secret.read_text() == "old\n"

    # A temp file whose writer still runs (this process) is not touched by the sweep.
    live = (
        second_user_tree / f".other.txt.{os.getpid()}-{proctree.start_time(os.getpid())}-{'a' * 12}.zodex-tmp"
    )
    live.write_text("in progress\n")
    outcome = apply_patch(_patch("*** Add File: next.txt", "+x"), str(second_user_tree))
    assert outcome.ok, outcome.text
    assert _temps(second_user_tree) == [live]


def test_root_keeps_the_owner_group_and_setuid_bit_of_another_users_file(tmp_path: Path) -> None:
    _require_root()
    uid, gid = second_user_ids()
    edited, added = tmp_path / "tool", tmp_path / "notes.txt"
    for path, mode in ((edited, 0o4750), (added, 0o640)):
        path.write_text("old\n")
        os.chown(path, uid, gid)
        path.chmod(mode)
    outcome = apply_patch(
        _patch("*** Update File: tool", "@@", "-old", "+new", "*** Add File: notes.txt", "+fresh"),
        str(tmp_path),
    )
    assert outcome.ok, outcome.text
    for path, mode in ((edited, 0o4750), (added, 0o640)):
        st = path.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (uid, gid, mode), path
    assert edited.read_text() == "new\n"
    assert added.read_text() == "fresh\n"


def _apply_as_second_user(patch: str, workdir: Path) -> tuple[bool, str]:
    script = (
        "import json, sys\n"
        "from zodex_worker.patch import apply_patch\n"
        "outcome = apply_patch(sys.stdin.read(), sys.argv[1])\n"
        "print(json.dumps([outcome.ok, outcome.text]))\n"
    )
    done = run_as_second_user([*second_user_python(), "-c", script, str(workdir)], input=patch)
    assert done.returncode == 0, done.stderr
    ok, text = json.loads(done.stdout)
    return bool(ok), str(text)


def test_setuid_and_setgid_are_dropped_when_the_owner_cannot_be_kept(second_user_tree: Path) -> None:
    require_second_user()
    hand_to_second_user(second_user_tree)
    shared = second_user_tree / "shared"
    shared.write_text("old\n")
    shared.chmod(0o6777)  # root's, writable by anyone, setuid and setgid
    ok, text = _apply_as_second_user(
        _patch("*** Update File: shared", "@@", "-old", "+new"), second_user_tree
    )
    assert ok, text
    st = shared.stat()
    assert st.st_uid == second_user_ids()[0]  # nobody rewrote it: it is nobody's now
    assert stat.S_IMODE(st.st_mode) == 0o777
    assert shared.read_text() == "new\n"


def test_an_ordinary_user_cannot_replace_read_only_files(second_user_tree: Path) -> None:
    require_second_user()
    hand_to_second_user(second_user_tree)
    locked_dir = second_user_tree / "locked"  # root's 0755: nobody may not remove from it
    locked_dir.mkdir(mode=0o755)
    files = {
        "ro.txt": 0o444,
        "ro-added.txt": 0o444,
        "ro-dest.txt": 0o444,
        "rw.txt": 0o644,
        "src.txt": 0o644,
    }
    for name, mode in files.items():
        path = second_user_tree / name
        path.write_text(f"{name}\n")
        hand_to_second_user(path).chmod(mode)
    sticky_dir = second_user_tree / "sticky"  # like /tmp: only a file's owner may remove it
    sticky_dir.mkdir()
    sticky_dir.chmod(0o1777)
    pinned, shared = locked_dir / "pinned.txt", sticky_dir / "shared.txt"
    for path in (pinned, shared):
        path.write_text(f"{path.name}\n")
        path.chmod(0o666)
    patch = _patch(
        "*** Update File: ro.txt",
        "@@",
        "-ro.txt",
        "+changed",
        "*** Add File: ro-added.txt",
        "+replaced",
        "*** Update File: src.txt",
        "*** Move to: ro-dest.txt",
        "@@",
        "-src.txt",
        "+moved",
        "*** Update File: locked/pinned.txt",
        "*** Move to: unpinned.txt",
        "@@",
        "-pinned.txt",
        "+moved",
        "*** Update File: sticky/shared.txt",
        "*** Move to: unshared.txt",
        "@@",
        "-shared.txt",
        "+moved",
        "*** Update File: rw.txt",
        "@@",
        "-rw.txt",
        "+changed",
    )
    ok, text = _apply_as_second_user(patch, second_user_tree)
    assert not ok
    root = second_user_tree
    assert text.startswith("apply_patch partially applied: 1 of 6 file operations succeeded.\n"), text
    for failure in (
        f"Update File {root}/ro.txt: cannot write {root}/ro.txt: Permission denied",
        f"Add File {root}/ro-added.txt: cannot write {root}/ro-added.txt: Permission denied",
        f"Update File {root}/src.txt (Move to {root}/ro-dest.txt): cannot write {root}/ro-dest.txt: Permission denied",
        f"Update File {root}/locked/pinned.txt (Move to {root}/unpinned.txt): cannot remove {root}/locked/pinned.txt: Permission denied",
        f"Update File {root}/sticky/shared.txt (Move to {root}/unshared.txt): cannot remove {root}/sticky/shared.txt: Permission denied",
    ):
        assert failure in text.split("\n"), text
    for name, mode in files.items():
        path = second_user_tree / name
        expected = "changed\n" if name == "rw.txt" else f"{name}\n"
        assert path.read_text() == expected, name
        assert stat.S_IMODE(path.stat().st_mode) == mode, name
    assert pinned.read_text() == "pinned.txt\n"
    assert shared.read_text() == "shared.txt\n"
    # Nothing was written before the checks.
    assert not (second_user_tree / "unpinned.txt").exists()
    assert not (second_user_tree / "unshared.txt").exists()
    assert _temps(second_user_tree) == []


def test_root_still_writes_read_only_files(tmp_path: Path) -> None:
    _require_root()
    target = tmp_path / "ro.txt"
    target.write_text("old\n")
    target.chmod(0o444)
    outcome = apply_patch(_patch("*** Update File: ro.txt", "@@", "-old", "+new"), str(tmp_path))
    assert outcome.ok, outcome.text
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o444
