"""What moved stays importable for one release, with a ``DeprecationWarning`` that names the
new import: names that moved out of a module (a module-level ``__getattr__``, :func:`moved`)
and modules that moved or merged into others (an import hook, :func:`alias_modules`)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def moved(module: str, new_homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module``: each name of ``new_homes`` from its new module (name ->
    module), with the warning; any other name is an AttributeError as usual."""

    def __getattr__(name: str) -> Any:
        home = new_homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"'from {module} import {name}' is deprecated: use 'from {home} import {name}' "
                      "(the old import goes in the next release)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), name)

    return __getattr__


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name and loads it as its new module (the same module object)."""

    def __init__(self, new_paths: Mapping[str, str]):
        self._new = dict(new_paths)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._new:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = self._new[spec.name]
        warnings.warn(f"module {spec.name!r} is deprecated: import from {new!r} (the old path goes in "
                      "the next release)", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the new module is already imported."""


def alias_modules(new_paths: Mapping[str, str]) -> None:
    """Make each old module name of ``new_paths`` (old -> new dotted path) import its new
    module, with the warning."""
    if not any(isinstance(f, _Alias) and f._new == dict(new_paths) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias(new_paths))
