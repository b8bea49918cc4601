"""``python -m purgekeeper``: purgectl, for an environment whose scripts directory is not on
``PATH`` (the same commands, options and exit codes)."""

from purgekeeper.commands.cli import main

if __name__ == "__main__":
    main()
