"""purgectl, the operator's command line: a thin layer over the ``commands`` package.

The group and what every command shares are in ``base``; the commands are in ``process``
(init, serve, scheduler, health), ``content_purges``, ``operate`` (status, list, retry,
resume, wait), ``policies`` (retention and holds), ``ledger`` and ``receipts``; their text output is
``render`` and their option types ``options``. Importing this package registers them all.

Lazy imports: ``purgectl --help`` (and any command's ``--help``) must not load SQLAlchemy, the
kinds or the HTTP stack, so these modules import the handle and the records for type checking
only (``if TYPE_CHECKING:``), and what a command runs (the handle, the processes, the
settings) inside the command; ``tests/unit/test_lazy_imports.py`` holds them to it, and
``bench/cli_startup.py`` measures it.
"""

import click

from purgekeeper import __version__
from purgekeeper.commands.cli import (  # noqa: F401 (they register)
    content_purges,
    content_sealing,
    key_server_commands,
    ledger_commands,
    operate,
    policies,
    process,
    receipt_commands,
    witness_commands,
)
from purgekeeper.commands.cli.shared import main

# The version is the package's own constant, not the installed metadata's (importlib.metadata
# walks sys.path): --version stays as cheap as --help, and a source tree answers it too.
click.version_option(__version__, "--version", prog_name="purgectl", message="%(prog)s %(version)s")(main)

__all__ = ["main"]
