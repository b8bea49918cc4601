"""Who runs an attempt: each OS process has a tag, in the id of its heartbeat row
(``purgekeeper.workers.heartbeat``) and in every lease owner it writes
(``purgekeeper.workers.runner.worker_identity``), so that the steps of a process known to be dead
are found by that tag (``purgekeeper.schema.heartbeats.release_dead``), never by its host and pid,
which a restarted process or another container may have too.

A process's tag is random, made once per pid. In a worker group run by ``python -m
purgekeeper.commands.worker``, the main process draws a random group secret
(``PURGEKEEPER_WORKER_GROUP``, which its worker processes inherit), and a worker process's tag
is derived from it and the process's pid: the main process can name the tag of a worker
process it saw exit, and release its steps at once.
"""

from __future__ import annotations

import hashlib
import os
import secrets

from purgekeeper.schema.heartbeats import TAG_LENGTH

GROUP_VARIABLE = "PURGEKEEPER_WORKER_GROUP"

_tags: dict[int, str] = {}


def process_tag(pid: int | None = None) -> str:
    """This process's tag, or (in a worker group) the tag of its sibling ``pid``."""
    own = os.getpid()
    pid = own if pid is None else pid
    group = os.environ.get(GROUP_VARIABLE)
    if group:
        return hashlib.sha256(f"{group}:{pid}".encode()).hexdigest()[:TAG_LENGTH]
    if pid != own:
        raise ValueError(f"the tag of process {pid} is known only within a worker group ({GROUP_VARIABLE})")
    return _tags.setdefault(pid, secrets.token_hex(TAG_LENGTH // 2))


def new_group() -> str:
    """Draw a group secret for the worker processes this process starts (set in its
    environment, which they inherit)."""
    os.environ[GROUP_VARIABLE] = secrets.token_hex(16)
    return os.environ[GROUP_VARIABLE]
