"""purgectl, the operator's command line: a thin layer over the ``commands`` package.

The group and what every command shares are in ``base``; the commands are in ``process``
(init, serve, scheduler, health), ``content_purges``, ``operate`` (status, list, retry,
resume, wait), ``policies`` (retention and holds), ``ledger`` and ``receipts``; their text output is
``render`` and their option types ``options``. Importing this package registers them all.
"""

from commands.cli import content_purges, ledger_commands, operate, policies, process, receipt_commands  # noqa: F401 (they register)
from commands.cli.shared import main

__all__ = ["main"]
