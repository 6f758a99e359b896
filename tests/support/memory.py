"""What a process's ``/proc/<pid>/smaps`` says of its mappings."""

from __future__ import annotations


def mergeable_mappings(smaps: str) -> set[str]:
    """The names of the mappings KSM may merge (``mg`` among their ``VmFlags``); an
    anonymous mapping is ``[anon]``."""
    names, name = set(), ""
    for line in smaps.splitlines():
        fields = line.split()
        if fields and not fields[0].endswith(":"):
            name = fields[5] if len(fields) > 5 else "[anon]"
        elif fields[:1] == ["VmFlags:"] and "mg" in fields[1:]:
            names.add(name)
    return names
