"""A griffe extension (``mkdocs.yml``): the handle's one-line delegates, read as the service
methods they forward to, so the API reference shows ``pk.confirm_purge`` with the signature
and docstring of ``PurgeCommands.confirm_purge`` (``purgekeeper.commands.delegation``)."""

from __future__ import annotations

from typing import Any

import griffe

HANDLE = "purgekeeper.commands.handle.Purgekeeper"


class DelegatedMethods(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.path != "purgekeeper":
            return
        handle = pkg.modules_collection[HANDLE]
        for name, member in list(handle.members.items()):
            value = getattr(member, "value", None)
            if isinstance(value, griffe.ExprCall) and str(value.function) == "delegate":
                method = value.arguments[1]
                handle.set_member(name, griffe.Alias(name, method.canonical_path, parent=handle, lineno=member.lineno))
