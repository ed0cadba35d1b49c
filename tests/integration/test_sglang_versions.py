"""The SGLang a host has installed, read and rendered for: real ``pip install --no-deps sglang==X`` interpreters.

Each version gets a virtualenv whose python is the server command's interpreter (as on a real host), and the scripts
that playbooks/deploy.yml writes for it are parsed by that version's own parser (scripts/sglang_parser.py); a flag the
version lacks is refused before anything is written. The generated flag table of 0.5.23 is regenerated from the
installed wheel and compared with the checked-in one.
"""

import os
import shlex
import subprocess
import sys

import pytest
import yaml
from ansible_collections.gpuops.sglang.plugins.plugin_utils.sglang_flag_tables import (
    OPTIONS,
)

from .conftest import HOST_PYTHON

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
import sglang_flag_tables

CACHE = os.path.join(REPO_ROOT, ".work", "sglang-versions")
PARSER = os.path.join(REPO_ROOT, "scripts", "sglang_parser.py")


class InstalledSGLang:
    """A virtualenv with ``sglang==version`` installed without its dependencies."""

    def __init__(self, version):
        self.version = version
        self.venv = os.path.join(CACHE, version, "venv")
        self.python = os.path.join(self.venv, "bin", "python")
        self.deps = os.path.join(CACHE, version, "parser-deps")
        if not os.path.exists(os.path.join(self.venv, ".installed")):
            subprocess.run([HOST_PYTHON, "-m", "venv", "--clear", self.venv], check=True)
            subprocess.run([self.python, "-m", "pip", "install", "-q", "--no-deps", f"sglang=={version}"], check=True)
            subprocess.run([self.python, "-m", "pip", "install", "-q", "--no-deps", "--target", self.deps,
                            *sglang_flag_tables.PARSER_DEPENDENCIES], check=True)
            open(os.path.join(self.venv, ".installed"), "w").close()
        self.site = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                   check=True, capture_output=True, text=True).stdout.strip()

    def parse(self, flags):
        """rc and stderr of the version's own parser on ``flags``."""
        completed = subprocess.run([HOST_PYTHON, "-I", PARSER, self.site + os.pathsep + self.deps, "parse", *flags],
                                   capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, check=False)
        return completed.returncode, completed.stderr[-500:]


@pytest.fixture(scope="module")
def installed():
    return {version: InstalledSGLang(version) for version in ("0.5.23", "0.5.10.post1")}


def script_flags(script):
    """The flags the launch script execs SGLang with (after the interpreter and its arguments)."""
    text = script.read_text()
    command = shlex.split(text[text.index("\nexec ") + 6:].replace("\\\n", " "))
    return command[command.index("--model-path"):]


def without_simulated_sglang(sim_host):
    """The simulated host without the simulator's SGLang: its dist-info's site off the servers' PYTHONPATH."""
    sim_host.host_vars["sglang_env"].pop("PYTHONPATH", None)
    sim_host.inventory.write_text(yaml.safe_dump({"all": {"children": {"sglang_hosts": {
        "hosts": {sim_host.name: sim_host.host_vars}}}}}))


def deploy(sim_host, sglang, extra_vars=None):
    # The real SGLang only: the simulated one's dist-info, first on the PYTHONPATH, would be found before it.
    without_simulated_sglang(sim_host)
    sim_host.host_vars["sglang_server_command"] = [sglang.python, "-m", "sglang.launch_server"]
    sim_host.host_vars["sglang_mamba_scheduler_strategy"] = "no_buffer"
    sim_host.host_vars["sglang_extra_args"] = {"chunked_prefill_size": 4096, "schedule_policy": "lpm"}
    sim_host.inventory.write_text(yaml.safe_dump({"all": {"children": {"sglang_hosts": {
        "hosts": {sim_host.name: sim_host.host_vars}}}}}))
    return sim_host.run("deploy", dict({"sglang_gpu_count": 2}, **(extra_vars or {})))


@pytest.mark.parametrize("version, spelling", [("0.5.23", "--mamba-radix-cache-strategy"),
                                               ("0.5.10.post1", "--mamba-scheduler-strategy")])
def test_scripts_are_rendered_for_the_installed_version_and_pass_its_own_parser(installed, sim_host, version,
                                                                                spelling):
    sglang = installed[version]
    result = deploy(sim_host, sglang)
    assert result.rc == 0, result
    for name in ("gpu0", "gpu1"):
        flags = script_flags(sim_host.script(name))
        assert spelling in flags
        assert sglang.parse(flags) == (0, "")
    # The parser refuses what it does not know (the check above is not vacuous).
    assert sglang.parse(["--model-path", "/m", "--no-such-flag"])[0] == 2


def test_an_extra_arg_the_installed_version_lacks_is_refused_before_anything_is_written(installed, sim_host):
    result = deploy(sim_host, installed["0.5.23"], {"sglang_extra_args": {"cuda_graph_max_bs": 64}})
    assert result.rc != 0
    message = repr(result)
    assert "--cuda-graph-max-bs is ambiguous" in message
    assert "use --cuda-graph-max-bs-decode or --cuda-graph-max-bs-prefill" in message
    assert not sim_host.script_dir.exists() or not list(sim_host.script_dir.iterdir())
    # The same extra arg is right for 0.5.10, which has the flag.
    assert deploy(sim_host, installed["0.5.10.post1"], {"sglang_extra_args": {"cuda_graph_max_bs": 64}}).rc == 0


def test_a_configured_version_that_disagrees_with_the_host_fails_naming_both(installed, sim_host):
    result = deploy(sim_host, installed["0.5.23"], {"sglang_version": "0.5.10"})
    assert result.rc != 0
    assert "sglang_version is 0.5.10, but" in repr(result) and "runs SGLang 0.5.23" in repr(result)
    assert not sim_host.script_dir.exists() or not list(sim_host.script_dir.iterdir())


def test_a_host_without_sglang_is_said_in_one_sentence(sim_host):
    without_simulated_sglang(sim_host)
    result = sim_host.run("deploy", {"sglang_gpu_count": 1})
    assert result.rc == 0, result
    notes = result.task("Say what the operator should know")
    interpreter = sim_host.host_vars["sglang_server_command"][0]
    assert notes and notes[0]["msg"] == [
        f"SGLang is not installed for {interpreter} (no sglang distribution in its environment)"]


def test_the_checked_in_table_is_what_the_parser_of_0_5_23_says(installed):
    sglang = installed["0.5.23"]
    options = sglang_flag_tables.options_of(sglang.site + os.pathsep + sglang.deps, HOST_PYTHON)
    regenerated = sglang_flag_tables.table(options)
    assert regenerated == OPTIONS["0.5.23"]
