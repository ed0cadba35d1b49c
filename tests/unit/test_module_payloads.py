"""What each module's AnsiballZ payload carries: the collection's module_utils its imports reach, never more.

Ansible ships a module with every module_util its imports reach, transitively; through proxmox_pct_remote each byte
travels in every call. The modules that only look at a host (GPUs, the hold, the journal, writing scripts) must not
carry the code that stops, kills and launches servers. Read from the sources, as Ansible's own finder does.
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "plugins" / "module_utils"
PACKAGE = "ansible_collections.gpuops.sglang.plugins.module_utils"
# The kill path: the job and sequence that stop and launch servers, their steps, and the launchers that signal them.
KILL_PATH = {"_lifecycle.job", "_lifecycle.sequence", "_lifecycle.steps", "launchers"}
LOOKING_ONLY = ("gpu_info", "journal", "launch_scripts")


def _source(name):
    """The file of the module_util ``name`` (dotted below module_utils: ``_lifecycle.plan``)."""
    return MODULE_UTILS / (name.replace(".", "/") + ".py")


def imported_module_utils(path):
    """Dotted names (below module_utils) of the collection's module_utils that the file at ``path`` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            sub = node.module[len(PACKAGE):].lstrip(".")
            # ``from <package> import name``: name is a module of the package, or something the package defines.
            found |= {sub} | {f"{sub}.{alias.name}".lstrip(".") for alias in node.names}
    return {name for name in found if _source(name).exists()}


def payload(module):
    """Every module_util the module's payload carries."""
    carried, todo = set(), list(imported_module_utils(REPO / "plugins" / "modules" / f"{module}.py"))
    while todo:
        name = todo.pop()
        if name not in carried:
            carried.add(name)
            todo += imported_module_utils(_source(name))
    return carried


@pytest.mark.parametrize("module", LOOKING_ONLY)
def test_a_module_that_only_looks_carries_no_kill_path(module):
    assert payload(module) & KILL_PATH == set()


def test_the_server_module_does_carry_it():
    """The check above can see the kill path at all."""
    assert payload("server") >= KILL_PATH


def test_the_hold_carries_the_planner_for_a_relaunch_with_nothing_to_change():
    """host_lock's converge plans the servers as the server module does (read only, its check mode) and waits for
    them: one call instead of three for a relaunch with nothing to change costs it the server module's code."""
    assert payload("host_lock") >= KILL_PATH | {"converge", "readiness"}
