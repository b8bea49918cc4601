"""``python -m purgekeeper.commands.cli``: purgectl."""

from purgekeeper.commands.cli import main

main()
