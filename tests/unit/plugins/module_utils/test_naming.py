"""The naming contract (module_utils/naming.py): the names on a host stay what older runs left there, and the roles,
the launch script renderer and the host-side code use the names the module defines."""

import ast
import inspect
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.sglang.plugins.module_utils import naming
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle import step_table
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.request import (
    script_problems,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.launch_script import (
    launch_script,
)

REPO = Path(__file__).resolve().parents[4]
ROLES = REPO / "roles"
ROLE_FILES = sorted(path for path in ROLES.rglob("*") if path.is_file() and path.suffix in (".yml", ".md"))
# A marker spelled anywhere: GPUOPS_SGLANG_ followed by a name (the docs' "GPUOPS_SGLANG_*" is the prefix).
MARKER_NAME = re.compile(r"GPUOPS_SGLANG_[A-Z0-9_]+")


@pytest.mark.parametrize("build, expected", [
    (lambda: naming.state_file("/s", "gpu0"), "/s/gpu0.json"),
    (lambda: naming.host_lock_file("/s"), "/s/.lock"),
    (lambda: naming.run_lease_file("/s"), "/s/run.json"),
    (lambda: naming.run_lease_lock_file("/s"), "/s/.run.lock"),
    (lambda: naming.journal_file("/s"), "/s/journal.jsonl"),
    (lambda: naming.journal_lock_file("/s"), "/s/.journal.lock"),
    (lambda: naming.job_file("/s", "20260101T000000-ab12cd34"), "/s/jobs/20260101T000000-ab12cd34.json"),
    (lambda: naming.last_good_file("/s", "gpu0", ".sh"), "/s/last-good/gpu0.sh"),
    (lambda: naming.last_good_file("/s", "gpu0", ".json", ".previous"), "/s/last-good/gpu0.previous.json"),
    (lambda: naming.launch_script_file("/opt/sglang/", "gpu0"), "/opt/sglang/gpu0.sh"),
    (lambda: naming.log_file("/var/log/sglang", "gpu0"), "/var/log/sglang/gpu0.log"),
    (lambda: naming.rotated_log("/var/log/sglang/gpu0.log", 2), "/var/log/sglang/gpu0.log.2"),
    (lambda: naming.legacy_unit_name("gpu0"), "gpuops-sglang-gpu0.service"),
    (lambda: naming.unit_name("gpu0", "/var/lib/gpuops-sglang/"), "gpuops-sglang-8d2ace59-gpu0.service"),
    (lambda: naming.DEFAULT_STATE_DIR, "/var/lib/gpuops-sglang"),
    (lambda: naming.MARKERS, ("GPUOPS_SGLANG_SERVER", "GPUOPS_SGLANG_STATE_DIR")),
], ids=lambda value: value if isinstance(value, str) else None)
def test_the_names_on_a_host_stay_what_older_runs_left_there(build, expected):
    """Renaming any of them orphans what a host already has: servers no longer found as ours, a second host lock,
    units never retired, last good scripts lost. A rename needs a migration, not an edit here."""
    assert build() == expected


def test_every_marker_starts_with_the_prefix_users_may_not_set():
    assert all(marker.startswith(naming.MARKER_PREFIX) for marker in naming.MARKERS)


@pytest.mark.parametrize("name, valid", [
    ("gpu0", True), ("qwen-tp8.r1_a", True), ("0", True), ("-gpu", False), (".hidden", False), ("", False),
    ("a/b", False), ("gpu0\n", False), ("a b", False), (None, False), ("run", False), ("run0", True),
])
def test_a_server_name_is_a_file_name_and_a_marker_value(name, valid):
    assert naming.valid_server_name(name) is valid


def test_the_naming_module_stays_light():
    """Every payload may carry it and the controller imports it: the standard library only."""
    tree = ast.parse((REPO / "plugins" / "module_utils" / "naming.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"hashlib", "os", "re"}


def test_the_step_table_covers_every_step_name():
    """A step named in naming.py but missing from the table would never be reported or finished."""
    steps = {value for key, value in vars(naming).items() if key.startswith("STEP_")}
    assert set(step_table.STEPS) == steps and len(step_table.STEPS) == len(steps)
    assert set(step_table.FINISHED_STEPS) | set(step_table.SIGNALLED_STEPS) <= steps


@pytest.mark.parametrize("path", ROLE_FILES, ids=lambda path: str(path.relative_to(ROLES)))
def test_the_roles_spell_only_markers_the_naming_module_defines(path):
    assert set(MARKER_NAME.findall(path.read_text())) <= set(naming.MARKERS)


def test_the_launch_script_exports_the_markers_the_host_looks_for(tmp_path):
    """The renderer spells no marker itself: it exports what launch_env returns, both markers first, in the shape
    the server module reads back from a script (and refuses a script marked for another server by)."""
    renderer = inspect.getsource(launch_script)
    assert MARKER_NAME.findall(renderer) == [] and "launch_env(server, settings)" in renderer
    server = {"name": "gpu3", "port": 30003, "gpus": [3], "tp_size": 1, "dp_size": 1}
    settings = {"model_path": "/models/m", "host": "127.0.0.1", "state_dir": "/srv/state"}
    script = launch_script(server, settings, "managed")
    exports = [line.split("=", 1)[0][len("export "):] for line in script.splitlines() if line.startswith("export ")]
    assert exports[:2] == [naming.MARKER_VAR, naming.DEPLOYMENT_VAR]
    assert f"export {naming.MARKER_VAR}=gpu3\n" in script
    assert f"export {naming.DEPLOYMENT_VAR}=/srv/state\n" in script
    path = tmp_path / "gpu3.sh"
    assert script_problems("servers[0]", "gpu3", str(path), {"content": script}) == []
    problems = script_problems("servers[0]", "gpu4", str(path), {"content": script})
    assert problems and f"exports {naming.MARKER_VAR}=gpu3" in str(problems)


def _role_specs():
    for path in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        for entry, spec in yaml.safe_load(path.read_text())["argument_specs"].items():
            yield path.parts[-3], entry, spec["options"]


def test_the_roles_default_state_dir_is_the_modules_default():
    defaults = {(role, entry): options["sglang_state_dir"].get("default")
                for role, entry, options in _role_specs() if "sglang_state_dir" in options}
    assert defaults and set(defaults.values()) == {naming.DEFAULT_STATE_DIR}, defaults
    role_defaults = yaml.safe_load((ROLES / "settings" / "defaults" / "main.yml").read_text())
    assert role_defaults["sglang_state_dir"] == naming.DEFAULT_STATE_DIR


def test_the_roles_document_the_unit_names_the_launcher_gives():
    unit = re.compile(r"gpuops-sglang-[^)\n]*?\.service")
    documented = {match for path in ROLE_FILES for match in unit.findall(path.read_text())}
    pattern = re.escape(naming.UNIT_PREFIX) + r"<deployment id>-<name>\.service"
    assert documented and all(re.fullmatch(pattern, name) for name in documented), documented
