"""purgekeeper's schema: tables, fences (triggers), migrations, queries and the error tree.

This package imports nothing else of purgekeeper's.
"""
