"""Where things are: the repository, and the collection importable from the checkout (as ansible.cfg does),
with the module_utils the bench reads logs with."""

import importlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
if str(REPO / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / "collections"))


def module_util(name):
    """A module of the collection's plugins/module_utils (stdlib-only code the bench shares)."""
    return importlib.import_module(f"ansible_collections.gpuops.sglang.plugins.module_utils.{name}")
