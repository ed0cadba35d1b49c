"""A Proxmox node that refuses the SSH connection: the relaunch says so, instead of community.proxmox's
"'Connection' object has no attribute '_raise_paramiko_connect_exception'" (2.0.0), and touches nothing.
A stopped or missing container: tests/rig/test_interruption.py (it needs the LXC rig)."""

import json
import os
import subprocess

from .conftest import BIN_DIR, REPO_ROOT, free_port


def test_refused_ssh_to_the_node_is_explained(tmp_path):
    port = free_port()  # nothing listens there
    model = tmp_path / "model"
    model.mkdir()
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"sglang_hosts": {"hosts": {"ct200": {
        "ansible_connection": "community.proxmox.proxmox_pct_remote", "ansible_host": "127.0.0.1",
        "ansible_port": port, "ansible_user": "root", "proxmox_vmid": 200,
        "ansible_python_interpreter": "/usr/bin/python3", "sglang_model_path": str(model)}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO_ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_HOST_KEY_CHECKING="False")
    run = subprocess.run([os.path.join(BIN_DIR, "ansible-playbook"), "-i", str(inventory), "playbooks/relaunch.yml"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0
    assert (f"node 127.0.0.1 unreachable: cannot open the SSH connection to the Proxmox node 127.0.0.1:{port} as "
            f"root for container 200 (port {port}: connection refused)") in run.stdout, run.stdout[-3000:]
    # The first contact (holding the host) failed: nothing after it ran.
    assert "Preflight" not in run.stdout and "Bring servers" not in run.stdout
