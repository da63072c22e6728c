"""Where the data subpackages (grammars, rules, report templates) come from.

The ``grammars/``, ``rules/`` and ``reports/`` folders sit at the top of the source tree
and are installed as ``logforensics.grammars``, ``.rules`` and ``.reports`` (pyproject's
package-dir; an editable install maps them too). Imported straight from a source checkout
without installing (``python -m logforensics`` in the repository), those three packages
are loaded from the folders beside this package; nothing else of the tree is importable
as ``logforensics.*``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

DATA_PACKAGES = ("grammars", "rules", "reports")


def use_source_tree_data() -> None:
    """Register the data subpackages from the source tree, when they are not installed."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if os.path.isdir(os.path.join(here, "grammars")) or not os.path.isfile(
            os.path.join(root, "grammars", "sglang.lark")):
        return  # installed (the data is inside the package), or not a source tree
    for name in DATA_PACKAGES:
        full = f"{__package__}.{name}"
        if full in sys.modules or importlib.util.find_spec(full) is not None:
            continue  # an editable install's finder provides it
        folder = os.path.join(root, name)
        spec = importlib.util.spec_from_file_location(
            full, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
