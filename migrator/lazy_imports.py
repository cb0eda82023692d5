"""libcst, imported on first use: a run pays for it only when it rewrites a file.

Importing libcst costs about 0.2 CPU-s, more than the interpreter and the rest of npu-migrate
together, and most runs never need it: ``--check``, and every file without a fix, work on
Python's ``ast`` alone; only a file that is rewritten gets concrete syntax trees. The rules and
the rule interface still spell libcst as usual (``cst.Attribute``, ``cst.Name("x")``) inside
their edits, through :data:`cst`: a stand-in for the module that imports it at the first read
of one of its attributes and from then on answers from the module's own namespace. Type checkers
see the real module.

A module may read :data:`cst` only inside functions (edits, and what builds them): a read at
module level imports libcst when that module is imported. ``tests/test_startup.py`` fails when
a ``--check`` that rewrites nothing imports libcst.

Modules that exist only to rewrite (:mod:`migrator.rewriter`, :mod:`migrator.slices`,
:mod:`migrator.imports`) import libcst directly and are themselves imported on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

__all__ = ["LazyModule", "cst", "get_full_name_for_node"]


class LazyModule(ModuleType):
    """The module named ``name``, imported at the first read of one of its attributes."""

    def __getattr__(self, attribute: str) -> Any:
        # Called only for names not in this object's namespace: after the first call, every
        # name of the real module is, so a read costs what a read of a module attribute costs.
        module = importlib.import_module(self.__name__)
        self.__dict__.update(vars(module))
        return getattr(module, attribute)


if TYPE_CHECKING:
    import libcst as cst
    from libcst.helpers import get_full_name_for_node
else:
    cst = LazyModule("libcst")

    def get_full_name_for_node(node: Any) -> str | None:
        """libcst's ``get_full_name_for_node``, imported on the first call."""
        from libcst.helpers import get_full_name_for_node as full_name

        return full_name(node)
