"""``python -m commands.cli``: purgectl."""

from commands.cli import main

main()
