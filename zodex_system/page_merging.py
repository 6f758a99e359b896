"""The worker template's pages marked for the kernel's samepage merging (KSM)
(docs/architecture.md#page-merging).

Idle workers forked from one template write to many of the same pages in the same way —
CPython's reference counts rise and fall, its caches fill alike — so their private copies
of those pages are often byte for byte the same as each other's and as the template's.
Where the operator runs KSM (``/sys/kernel/mm/ksm/run``, off unless they turn it on), the
kernel keeps such pages once, for the pages a process has marked mergeable.

The template marks its writable private mappings once its imports are done, before it
forks: its workers inherit the marks (they are the mappings' own), and ``execve`` drops
them with the mappings, so no command a worker starts is ever marked. That is why it is
``madvise(MADV_MERGEABLE)`` on the mappings and not ``PR_SET_MEMORY_MERGE``, which the
kernel keeps across ``execve``.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Final

MADV_MERGEABLE: Final = 12
# Kernel mappings and stacks: the kernel refuses the first and the second only ever changes.
UNMARKED: Final = frozenset({"[stack]", "[vvar]", "[vvar_vclock]", "[vdso]", "[vsyscall]"})


def writable_private_mappings(maps: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` of each writable private mapping in a ``/proc/<pid>/maps`` text,
    kernel mappings and stacks left out."""
    ranges = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or fields[1][1] != "w" or fields[1][3] != "p":
            continue
        if len(fields) == 6 and fields[5].strip() in UNMARKED:
            continue
        start, end = (int(bound, 16) for bound in fields[0].split("-"))
        ranges.append((start, end))
    return ranges


def mark_mergeable() -> int:
    """Mark this process's writable private mappings mergeable; the bytes marked. A mapping
    the kernel refuses (none when it has no KSM) is passed over: it stays as it was."""
    libc = ctypes.CDLL(None, use_errno=True)
    madvise = libc.madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    marked = 0
    for start, end in writable_private_mappings(Path("/proc/self/maps").read_text()):
        if madvise(start, end - start, MADV_MERGEABLE) == 0:
            marked += end - start
    return marked
