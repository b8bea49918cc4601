"""purgekeeper's workers: the broker, the actors that carry out cleanup steps, and the
scheduler that resumes them.

Imports go one way: ``commands`` → ``workers`` → ``storage`` → ``schema``. What the workers
remove and keep on disk (the blob store, Memory, the ledger's copy and signed log) is in
``storage``.
"""
