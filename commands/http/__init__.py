"""The HTTP surface: the API under ``/v1`` (``app``; its response bodies are ``models``, its
streamed event uploads ``uploads``, its token and body caps ``guard``) and the server process
that runs it with ``/status`` and ``/metrics`` (``server``)."""

from commands.http.app import create_app

__all__ = ["create_app"]
