"""The operator's web pages: the console at ``/status`` (``status``), Prometheus ``/metrics``
(``metrics``), and the tokens and session they share (``auth``)."""
