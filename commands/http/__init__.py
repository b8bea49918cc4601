"""The HTTP surface: the API under ``/v1`` (``app``) and the server process that runs it
with ``/status`` and ``/metrics`` (``server``)."""

from commands.http.app import create_app

__all__ = ["create_app"]
