"""The HTTP surface: the API under ``/v1`` (``app`` assembles it: its routes by area are
``routes``, its request bodies ``bodies`` of the field types of ``fields``, its response
bodies ``models``, its errors ``errors``, its streamed event uploads ``uploads``, its token
and body caps ``guard``) and the server process that runs it with ``/status`` and
``/metrics`` (``server``, with the ``--demo`` world in ``demo``)."""

from purgekeeper.commands.http.app import create_app

__all__ = ["create_app"]
