import json
import os
import subprocess
import sys

from ansible_collections.gpuops.sglang.plugins.filter.sglang import (
    FILTERS,
    PLUGIN_UTILS,
)

COLLECTIONS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "collections"))


def imported_by(module):
    """The collection's controller modules a fresh interpreter holds after importing ``module``."""
    code = (f"import json, sys; import {module}; "
            f"print(json.dumps(sorted(name for name in sys.modules if name.startswith({PLUGIN_UTILS!r}))))")
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=COLLECTIONS),
                          capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


def test_loading_a_callback_imports_the_code_of_every_filter_so_that_the_task_forks_inherit_it():
    wanted = {PLUGIN_UTILS + module for module, _function, _error in FILTERS.values()}
    assert wanted <= imported_by("ansible_collections.gpuops.sglang.plugins.callback.preload")
    assert wanted <= imported_by("ansible_collections.gpuops.sglang.plugins.callback.operator")
    assert not wanted & imported_by("ansible_collections.gpuops.sglang.plugins.filter.sglang"), (
        "the filters alone import their code on first call (a task's fork that uses none pays nothing)")
