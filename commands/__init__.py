"""The command layer: the host's and the operator's API, and its surfaces.

The public names are re-exported by the package ``purgekeeper`` (its ``__init__``), which is
what a host imports. Here live the handle (``handle.py``), what each purge kind does
(``kinds/``), and the surfaces over them: ``cli/`` (``purgectl``), ``http/`` (the API) and
``web/`` (the console and ``/metrics``).
"""
