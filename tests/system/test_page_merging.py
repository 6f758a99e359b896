"""The worker template's pages marked for KSM (docs/architecture.md#page-merging): every
writable private mapping but the stack and the kernel's, in a process of its own; nothing
of a program it then executes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.memory import mergeable_mappings
from zodex_system.page_merging import writable_private_mappings

MAPS = """\
55d0a0000000-55d0a0001000 r--p 00000000 fe:00 26723    /usr/bin/python3.11
55d0a0400000-55d0a0402000 rw-p 00400000 fe:00 26723    /usr/bin/python3.11
55d0a1000000-55d0a1500000 rw-p 00000000 00:00 0        [heap]
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
7f0000200000-7f0000201000 rw-s 00000000 00:05 12       /dev/zero (deleted)
7f0000300000-7f0000301000 r-xp 00000000 fe:00 999      /usr/lib/libc.so.6
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0        [stack]
7ffc00100000-7ffc00104000 r--p 00000000 00:00 0        [vvar]
7ffc00104000-7ffc00106000 r-xp 00000000 00:00 0        [vdso]
"""


def test_the_writable_private_mappings_are_listed_without_stack_shared_or_read_only_ones() -> None:
    assert writable_private_mappings(MAPS) == [
        (0x55D0A0400000, 0x55D0A0402000),
        (0x55D0A1000000, 0x55D0A1500000),
        (0x7F0000000000, 0x7F0000100000),
    ]


@pytest.mark.skipif(not Path("/sys/kernel/mm/ksm").exists(), reason="this kernel has no KSM")
def test_marked_mappings_are_mergeable_and_a_program_executed_after_has_none() -> None:
    probe = (
        "import subprocess\n"
        "from pathlib import Path\n"
        "from zodex_system.page_merging import mark_mergeable\n"
        "assert mark_mergeable() > 0\n"
        "print(Path('/proc/self/smaps').read_text())\n"
        "print('=== after exec ===')\n"
        "print(subprocess.run(['cat', '/proc/self/smaps'], capture_output=True, text=True, check=True).stdout)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    own, executed = out.split("=== after exec ===")
    marked = mergeable_mappings(own)
    assert {"[heap]", "[anon]"} <= marked and "[stack]" not in marked, marked
    assert mergeable_mappings(executed) == set()
