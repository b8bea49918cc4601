"""The database sessions' defaults that the settings name, apart from ``schema/db.py`` so that
reading the settings (``purgectl --help`` does) does not load SQLAlchemy. What each one bounds
is explained beside the others in ``schema/db.py``."""

from __future__ import annotations

import datetime as dt

IDLE_IN_TRANSACTION_TIMEOUT = dt.timedelta(seconds=10)
