"""Helpers several test modules share, one module per area. A test module imports a helper
from here (or a fixture from a conftest), never from another test module:

- ``reads``: raw reads of the database behind a handle (``rows``, ``scalar``);
- ``steps``: running a purge's steps as a worker would (``settle``, ``POLICY``), and a blob
  store whose unlinks fail (``FailingStore``);
- ``databases``: the test PostgreSQL server and Redis (admin connections, creating and
  dropping databases, ``RawSQL``), used by the root conftest's fixtures;
- ``factories``: conversations, events with attachments, and purges, made through a handle.

The names below are the ones ``tests/helpers.py`` exported when it was one module.
"""

from tests.helpers.reads import rows, scalar
from tests.helpers.steps import POLICY, SETTLE_S, FailingStore, settle

__all__ = ["POLICY", "SETTLE_S", "FailingStore", "rows", "scalar", "settle"]
