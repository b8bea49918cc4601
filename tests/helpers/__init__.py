"""Helpers several test modules share, one module per area. A test module imports a helper
from here (or a fixture from a conftest), never from another test module:

- ``reads``: raw reads of the database behind a handle (``rows``, ``scalar``);
- ``steps``: running a purge's steps as a worker would (``settle``, ``POLICY``), and a blob
  store whose unlinks fail (``FailingStore``);
- ``factories``: a conversation with events, an event with CAS and real-file attachments, and
  purges (a content purge previewed and confirmed, a conversation purge), through the handle;
- ``databases``: the test PostgreSQL server and Redis (admin connections, creating and
  dropping databases, ``RawSQL``), under the root conftest's fixtures;
- ``backups``: whole-database backups and restores in place (``Backups``);
- ``raw``: raw SQL writers and the refusals the triggers raise;
- ``cleanup``: content seeded for a purge and raw pokes at its steps (leases, attempts, a
  broken blob file), and running the steps;
- ``restore``: running every purge's steps again after a restore (``clean``);
- ``retention``: policies, scheduler turns, and a restore followed by its merge;
- ``receipts``, ``ledger``, ``interop``: receipts and the signed log, ledger entries for the
  ledger copy, and Go's tlog as a second implementation;
- ``http``, ``console``: the HTTP API's and the operator console's clients, tokens, and
  assertions;
- ``purgectl``: the CLI run as a process of its own; ``served``: a real ``purgectl serve``;
- ``processes``: real worker and scheduler processes, a Redis and a PostgreSQL cluster of the
  test's own, and bounded waits (the fixtures are in tests/faults/conftest.py).

The names below are the ones ``tests/helpers.py`` exported when it was one module.
"""

from tests.helpers.reads import all_opened, blob_bytes, bodies, body_of, opened, rows, scalar
from tests.helpers.steps import POLICY, SETTLE_S, FailingStore, settle

__all__ = [
    "POLICY",
    "SETTLE_S",
    "FailingStore",
    "all_opened",
    "blob_bytes",
    "bodies",
    "body_of",
    "opened",
    "rows",
    "scalar",
    "settle",
]
