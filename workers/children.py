"""A process's living children, read from ``/proc`` (Linux), a zombie counting as exited: how
the tests and the soak find the worker processes of a group to kill or to freeze. (The
group's own main process knows its children: ``purgekeeper.workers.supervisor``.)
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def living_children(parent: int, proc: Path = PROC) -> set[int]:
    """The pids of ``parent``'s children that have not exited (none where there is no /proc)."""
    found = set()
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # gone meanwhile
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid == parent and state not in ("Z", "X"):
            found.add(int(entry.name))
    return found
