"""Names that moved out of a module stay importable from it for one release, with a
``DeprecationWarning`` that names the new import (a module-level ``__getattr__``)."""

from __future__ import annotations

import importlib
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
