"""Our modules through the real community.proxmox.proxmox_pct_remote: one `pct exec` per module call.

The action plugins put the module on stdin of the container's python3 (plugins/plugin_utils/pipelining.py)
where Ansible would make a temp dir, stream the module through `cat`, chmod, run and clean up: six
`pct exec` calls. Adds one 8-GPU container to the session's rig (tests/rig/shared.py), runs the playbooks users run
(ansible-playbook, the installed pct stand-in counting every call), and removes it.
"""

import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from ansible_collections.community.proxmox.plugins.connection import proxmox_pct_remote

from .test_rig import COMMAND_TIMEOUT, REPO, pct, pct_execs_during, skip_reason

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

BIN = Path(sys.executable).parent
# The interpreter alone, its stdin the module (named after the "#").
PIPELINED = re.compile(r"^/\S+/python3[.\d]* # gpuops\.sglang\.(\w+)$")
THROUGH_TEMP_DIR = re.compile(r"python3 \S+/AnsiballZ_(\w+)\.py$")
WAIT_PROGRESS = re.compile(r"^ct\d+: \d+/8 ready", re.MULTILINE)
SCRIPT_DIR = "/opt/gpuops-pipelining/bin"
# A production-like host: 8 one-GPU servers whose scripts carry the usual environment and tuning flags
# (about 2 KB each, spelt for SGLang 0.5.23: the rig's), on the rig's simulated GPUs and SGLang.
HOST_VARS = {
    "sglang_gpu_count": 8,
    "sglang_server_command": ["python3", "{{ gpuops_rig_simulator_dir }}/sglang_sim.py"],
    "sglang_model_path": "/models/fake-model",
    "sglang_served_model_name": "fake-model",
    "sglang_mem_fraction_static": 0.85,
    "sglang_max_running_requests": 256,
    "sglang_context_length": 32768,
    "sglang_extra_args": {"chunked_prefill_size": 8192, "cuda_graph_max_bs_decode": 256, "watchdog_timeout": 600,
                          "attention_backend": "flashinfer", "trust_remote_code": True, "page_size": 16},
    "sglang_env": {
        "GPUOPS_FAKE_GPU_DIR": "{{ gpuops_rig_fake_gpu_dir }}", "SGLANG_SIM_TIME_SCALE": "3",
        "HF_HOME": "/srv/hf-cache", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "8", "NCCL_DEBUG": "WARN",
        "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,garbage_collection_threshold:0.8",
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "SGLANG_ENABLE_JIT_DEEPGEMM": "0",
        "CUDA_MODULE_LOADING": "LAZY", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    },
    "sglang_script_dir": SCRIPT_DIR,
    "sglang_log_dir": "/var/log/gpuops-pipelining",
    "sglang_gpu_device_dir": "{{ gpuops_rig_fake_gpu_dir }}/dev",
    "sglang_nvidia_driver_dir": "{{ gpuops_rig_fake_gpu_dir }}/driver/gpus",
    "relaunch_wait_timeout": 120,
    "relaunch_stall_timeout": 30,
    # Short slices and startups of 9-15 s: the wait takes several slices, each its own module call, even on a loaded
    # machine (3-5 s were once over before the server task ended).
    "relaunch_progress_interval": 1,
}
# Stands in for a broken python in the container: it dies with a traceback before the module answers.
DYING_PYTHON = "/usr/local/bin/python3-dies"
DYING_PYTHON_SCRIPT = """#!/bin/sh
exec /usr/bin/python3 -c 'raise MemoryError("the interpreter died before answering")'
"""
GPU_INFO_ARGS = {"gpu_device_dir": "/var/lib/fake-gpu/dev", "nvidia_driver_dir": "/var/lib/fake-gpu/driver/gpus"}
RENDER_PLAYBOOK = """\
- name: Render the launch scripts on the controller, as the relaunch does, and keep them for the test
  hosts: sglang_hosts
  gather_facts: false
  tasks:
    - name: Expand the topology
      ansible.builtin.include_role:
        name: gpuops.sglang.launch_scripts
        tasks_from: topology.yml
    - name: Render
      ansible.builtin.include_role:
        name: gpuops.sglang.launch_scripts
        tasks_from: render.yml
    - name: Keep them
      ansible.builtin.copy:
        content: "{{ launch_scripts_files | to_json }}"
        dest: "{{ rendered_path }}"
        mode: "0600"
      delegate_to: localhost
      no_log: true
"""


@pytest.fixture(scope="module")
def host(shared_rig, tmp_path_factory):
    """One 8-GPU container of the session's rig, in the sglang_hosts group of an inventory of the settings above."""
    inventory = tmp_path_factory.mktemp("sglang")
    with shared_rig.container(gpus=8, inventory=inventory / "rig.yml") as (vmid, state):
        (inventory / "group_vars").mkdir()
        (inventory / "hosts.yml").write_text(json.dumps({"sglang_hosts": {"children": {"rig": {}}}}))
        (inventory / "group_vars" / "sglang_hosts.yml").write_text(json.dumps(HOST_VARS))
        yield {**state, "vmid": vmid, "name": f"ct{vmid}", "inventories": ["-i", str(inventory)]}


def run(host, argv, env=None):
    """Run an ansible CLI in the repo; return (the process, the pct calls it made as their commands)."""
    results = []
    calls = pct_execs_during(host, lambda: results.append(subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False, env=env)))
    assert all(argv[:4] == ["exec", str(host["vmid"]), "--", "/bin/sh"] for argv in calls), calls
    return results[0], [argv[-1] for argv in calls]


def playbook(host, name, *extra, env=None):
    return run(host, [str(BIN / "ansible-playbook"), *host["inventories"], name, *extra], env)


def adhoc(host, module, args, *extra, env=None):
    argv = [str(BIN / "ansible"), *host["inventories"], host["name"], "-m", module, "-a", json.dumps(args), *extra]
    return run(host, argv, env)


def pipelined_runs(commands):
    """{module: runs} when every command is one pipelined module run, else the assertion names the others."""
    others = [command for command in commands if not PIPELINED.match(command)]
    assert not others, f"pct exec calls that are not one pipelined module run each: {others}"
    return Counter(PIPELINED.match(command).group(1) for command in commands)


def output(process):
    return process.stdout + process.stderr


def test_every_module_call_of_the_playbooks_is_one_pct_exec(host):
    # How many module calls each playbook makes is the roles' business (molecule's default scenario counts
    # them); here every pct exec must be one module call, pipelined.
    relaunch, commands = playbook(host, "playbooks/relaunch.yml", "-e", "relaunch_state=restarted")
    assert relaunch.returncode == 0, output(relaunch)
    runs = pipelined_runs(commands)
    # The whole relaunch is the hold's call, one pct exec per slice (each printed a progress line after its first).
    assert set(runs) == {"host_lock"} and runs["host_lock"] >= 2, runs
    assert runs["host_lock"] >= len(WAIT_PROGRESS.findall(relaunch.stdout)) >= 1, (runs, relaunch.stdout)
    # With --diff the role's own calls show the scripts' diffs: the server and the wait, each in slices too.
    diff, commands = playbook(host, "playbooks/relaunch.yml", "-e", "relaunch_state=restarted", "--diff")
    assert diff.returncode == 0, output(diff)
    runs = pipelined_runs(commands)
    # One pct exec per wait slice: each slice printed its progress line.
    assert runs["wait"] == len(WAIT_PROGRESS.findall(diff.stdout)) >= 2, (runs, diff.stdout)
    assert runs["server"] >= 1 and runs["host_lock"] == 1, runs
    seen = set(runs)
    for name in ("playbooks/relaunch.yml", "playbooks/status.yml", "playbooks/deploy.yml"):  # nothing to change
        process, commands = playbook(host, name)
        assert process.returncode == 0 and "changed=0" in process.stdout, output(process)
        seen |= set(pipelined_runs(commands))
    stop, commands = playbook(host, "playbooks/stop.yml")
    assert stop.returncode == 0, output(stop)
    seen |= set(pipelined_runs(commands))
    # gpu_info: test_become_takes_the_temp_dir_path runs it pipelined, whichever playbook asks for it.
    assert seen >= {"host_lock", "server", "wait", "server_info", "launch_scripts"}, seen

    # Nothing left in the container: no temp dir (no mkdir above), and the payload's own scratch dir is gone.
    leftovers = pct(host, "exec", str(host["vmid"]), "--", "/bin/sh", "-c",
                    "ls -A /root/.ansible/tmp 2>/dev/null; ls -d /tmp/ansible_* 2>/dev/null; true")
    assert leftovers.stdout == ""


def test_api_key_and_eight_scripts_arrive_intact_and_the_key_is_never_shown(host, tmp_path):
    api_key = f"sk-{secrets.token_hex(24)}"
    rendered_path = tmp_path / "rendered.json"
    (tmp_path / "render.yml").write_text(RENDER_PLAYBOOK)
    key = ["-e", json.dumps({"sglang_api_key": api_key})]
    render, commands = playbook(host, str(tmp_path / "render.yml"), *key, "-e", f"rendered_path={rendered_path}")
    assert render.returncode == 0 and commands == [], output(render)
    rendered = {script["path"]: script["content"] for script in json.loads(rendered_path.read_text())}
    assert len(rendered) == 8 and all(f"--api-key {api_key}" in content for content in rendered.values())
    assert sum(len(content) for content in rendered.values()) > 8 * 1800

    relaunch, commands = playbook(host, "playbooks/relaunch.yml", *key, "-e", "relaunch_state=restarted", "-vvv")
    assert relaunch.returncode == 0, output(relaunch)[-20000:]
    assert set(pipelined_runs(commands)) == {"host_lock"}, "the relaunch in the hold's one call"
    assert api_key not in output(relaunch)
    # Served with the key: the wait's health probes and /get_server_info were authenticated.
    assert "8/8 serving" in relaunch.stdout

    written = pct(host, "exec", str(host["vmid"]), "--", "sha256sum", *sorted(rendered))
    assert written.returncode == 0, written.stderr
    assert dict(reversed(line.split("  ", 1)) for line in written.stdout.splitlines()) == {
        path: hashlib.sha256(content.encode()).hexdigest() for path, content in rendered.items()}

    # Check mode and diff pass through too: the changed flag is shown, the key masked, nothing written.
    deploy, commands = playbook(host, "playbooks/deploy.yml", *key, "-e", "sglang_max_running_requests=128",
                                "--check", "--diff", "-vvv")
    assert deploy.returncode == 0, output(deploy)
    # Check mode holds nothing but reads the host's SGLang (the hold's module, held: false) to render for it.
    assert pipelined_runs(commands) == {"host_lock": 1, "launch_scripts": 1}
    assert "+    --max-running-requests 128 \\" in deploy.stdout and "changed=1" in deploy.stdout
    assert api_key not in output(deploy)
    assert pct(host, "exec", str(host["vmid"]), "--", "sha256sum", *sorted(rendered)).stdout == written.stdout


def test_become_takes_the_temp_dir_path(host):
    pipelined, commands = adhoc(host, "gpuops.sglang.gpu_info", GPU_INFO_ARGS)
    assert pipelined.returncode == 0 and pipelined_runs(commands) == {"gpu_info": 1}, output(pipelined)
    become, commands = adhoc(host, "gpuops.sglang.gpu_info", GPU_INFO_ARGS, "--become", "-vvv")
    assert become.returncode == 0, output(become)
    assert "gpuops.sglang.gpu_info: through a remote temp dir (community.proxmox.proxmox_pct_remote, become)" \
        in become.stdout
    assert len(commands) == 6 and THROUGH_TEMP_DIR.search(commands[4]).group(1) == "gpu_info", commands
    assert become.stdout.count("NVIDIA H200") == pipelined.stdout.count("NVIDIA H200") == 8


def test_a_connection_not_known_to_pass_stdin_takes_the_temp_dir_path(host, tmp_path):
    # The very same plugin under another name, as a fork or a vendored copy would be.
    source = Path(proxmox_pct_remote.__file__).read_text()
    copy = source.replace("name: proxmox_pct_remote", "name: pct_copy").replace(
        'transport = "community.proxmox.proxmox_pct_remote"', 'transport = "pct_copy"')
    assert copy.count("pct_copy") == 2
    (tmp_path / "pct_copy.py").write_text(copy)
    env = dict(os.environ, ANSIBLE_CONNECTION_PLUGINS=str(tmp_path))
    process, commands = adhoc(host, "gpuops.sglang.gpu_info", GPU_INFO_ARGS, "-e", "ansible_connection=pct_copy",
                              env=env)
    assert process.returncode == 0, output(process)
    assert len(commands) == 6 and THROUGH_TEMP_DIR.search(commands[4]).group(1) == "gpu_info", commands


@pytest.mark.parametrize("path", ["pipelined", "temp dir"])
def test_module_failures_come_back_as_clearly_as_before(host, path):
    extra = ["--become"] if path == "temp dir" else []
    calls_per_run = 1 if path == "pipelined" else 6

    absent_nvidia_smi = dict(GPU_INFO_ARGS, nvidia_smi="/opt/absent/nvidia-smi")
    failed, commands = adhoc(host, "gpuops.sglang.gpu_info", absent_nvidia_smi, *extra)
    assert failed.returncode == 2 and len(commands) == calls_per_run, (commands, output(failed))
    assert "FAILED!" in failed.stdout and "/opt/absent/nvidia-smi" in failed.stdout

    # An interpreter that is not there, and one that dies with a traceback before answering. Pipelined, no JSON
    # back costs one exec more: `echo ~` says the container runs commands, so it is the module's failure.
    missing, commands = adhoc(host, "gpuops.sglang.gpu_info", GPU_INFO_ARGS, *extra,
                              "-e", "ansible_python_interpreter=/usr/bin/python3-absent")
    assert missing.returncode == 2, output(missing)
    probe = ["echo ~"] if path == "pipelined" else []
    assert len(commands) == calls_per_run + len(probe) and commands[calls_per_run:] == probe, commands
    assert "The module interpreter '/usr/bin/python3-absent' was not found." in missing.stdout
    dying = pct(host, "exec", str(host["vmid"]), "--", "/bin/sh", "-c",
                f"cat > {DYING_PYTHON} && chmod 755 {DYING_PYTHON}",
                stdin=DYING_PYTHON_SCRIPT)
    assert dying.returncode == 0, dying.stderr
    crashed, commands = adhoc(host, "gpuops.sglang.gpu_info", GPU_INFO_ARGS, *extra,
                              "-e", f"ansible_python_interpreter={DYING_PYTHON}")
    assert crashed.returncode == 2, output(crashed)
    assert "Traceback (most recent call last)" in crashed.stdout
    assert "MemoryError: the interpreter died before answering" in crashed.stdout


def test_interpreter_discovery_costs_one_pct_exec_per_host_and_run(host):
    process, commands = playbook(host, "playbooks/status.yml", "-e", "ansible_python_interpreter=auto_silent")
    assert process.returncode == 0, output(process)
    assert len(commands) == 3 and commands[0].startswith("echo FOUND; command -v "), commands
    assert pipelined_runs(commands[1:]) == {"server_info": 1, "gpu_info": 1}


@pytest.mark.parametrize("pipelining", [True, False])
def test_local_pipelines_always_and_ssh_as_ansibles_pipelining_setting_says(host, tmp_path, pipelining):
    args = json.dumps({"servers": [], "state_dir": str(tmp_path)})
    # ssh to the rig's node sshd, so the module runs on this machine; no master connection left behind.
    ssh = {"ansible_port": host["port"], "ansible_user": "root", "ansible_private_key_file": host["private_key"],
           "ansible_ssh_args": "-o ControlMaster=no"}
    for connection, variables, expected in (
            ("local", {}, "pipelined by Ansible" if pipelining else "pipelined by gpuops.sglang"),
            ("ssh", ssh, "pipelined by Ansible" if pipelining else "through a remote temp dir")):
        variables = {**variables, "ansible_pipelining": pipelining, "ansible_python_interpreter": sys.executable}
        process = subprocess.run(
            [str(BIN / "ansible"), "-i", "127.0.0.1,", "all", "-c", connection, "-m", "gpuops.sglang.server_info",
             "-a", args, "-e", json.dumps(variables), "-vvv"],
            cwd=REPO, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
        assert process.returncode == 0, output(process)
        assert f"gpuops.sglang.server_info: {expected} ({connection})" in process.stdout
        execs = [line for line in process.stdout.splitlines() if re.match(r"<127\.0\.0\.1> (SSH: )?EXEC ", line)]
        if expected == "through a remote temp dir":
            assert "PUT " in process.stdout and any("AnsiballZ_server_info.py" in line for line in execs), execs
        else:
            assert len(execs) == 1 and "# gpuops.sglang.server_info" in execs[0], execs


def test_a_container_that_runs_nothing_is_unreachable_as_on_the_temp_dir_path(host):
    # Last: the restart ends the servers the tests before left running.
    vmid = str(host["vmid"])
    assert pct(host, "stop", vmid).returncode == 0
    try:
        stopped, commands = adhoc(host, "gpuops.sglang.gpu_info", GPU_INFO_ARGS)
    finally:
        assert pct(host, "start", vmid).returncode == 0
    # The module's exec, then the probe that tells a container pct cannot enter from a module that died.
    assert stopped.returncode == 4 and len(commands) == 2 and commands[1] == "echo ~", (commands, output(stopped))
    assert "UNREACHABLE!" in stopped.stdout
    assert f"the host runs no command: `echo ~` exited with 2 (container '{vmid}' not running!)" in stopped.stdout
