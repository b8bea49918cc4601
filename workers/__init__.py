"""purgekeeper's workers: the files on disk that purges remove, the broker, actors and scheduler.

Imports go one way: ``commands`` → ``workers`` → ``schema``.
"""
