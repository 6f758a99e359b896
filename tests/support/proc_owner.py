"""A stand-in for a worker in process-tree tests, run as ``python -m tests.support.proc_owner
<handle> <script>``.

It becomes a child subreaper (as the worker does), starts ``/bin/bash -c <script>`` as a
session leader whose environment carries the session marker, prints ``{"leader": pid}``,
and waits for its stdin to close. Then it SIGKILLs every child it has — the leader and
any orphans that were re-parented to it — reaps them all, and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys

from zodex_system import proctree
from zodex_worker.reaper import become_subreaper


def main() -> None:
    handle, script = sys.argv[1], sys.argv[2]
    if not become_subreaper():
        sys.exit("cannot become a child subreaper")
    env = {**os.environ, proctree.SESSION_MARKER: handle}
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1)]
    leader = os.posix_spawn("/bin/bash", ["bash", "-c", script], env, file_actions=quiet, setsid=True)
    print(json.dumps({"leader": leader}), flush=True)
    sys.stdin.read()
    while children := proctree.worker_children():
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


if __name__ == "__main__":
    main()
