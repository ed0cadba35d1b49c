"""Every molecule scenario (molecule/<name>) end to end: `molecule test -s <name>`.

Each run adds its containers to the session's LXC rig (tests/rig/shared.py: real containers reached through
community.proxmox.proxmox_pct_remote), converges, verifies with testinfra and removes its containers again
(MOLECULE_RIG_SHARED: destroy takes down the scenario's containers, not the rig). Where a scenario also covers
the systemd launcher, it does so with more hosts in the same converge (default: ct202 and ct203; change: ct201),
not with a second run.
The first run on a machine builds the rig's base container (about 75 s); later runs snapshot it.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rig import rig

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCENARIOS = sorted(path.parent.name for path in (REPO / "molecule").glob("*/molecule.yml"))
# Hang guard, not a speed check: a pct exec blocked by a background child never returns.
SCENARIO_TIMEOUT = 1200
# Every scenario's containers at the most (MOLECULE_RIG_UP_ARGS of molecule/default and molecule/multinode).
SCENARIO_CONTAINERS = [200, 201, 202, 203]


def skip_reason():
    if not (BIN / "molecule").exists():
        return f"molecule not found next to {sys.executable}"
    return rig.unavailable_reason()


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, shared_rig):
    # molecule runs ansible-config and ansible-playbook from PATH.
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", PY_COLORS="0", ANSIBLE_FORCE_COLOR="0",
               MOLECULE_RIG_PORT=str(shared_rig.port), MOLECULE_RIG_SHARED="1")
    env.pop("MOLECULE_KEEP_RIG", None)
    # Molecule keeps "created"/"prepared" in ~/.ansible/tmp per project path: a run cut short on this machine would
    # make it skip the create of containers that are gone. Every run starts from no state.
    for owner in sorted({scenario, "default"}):
        subprocess.run([str(BIN / "molecule"), "reset", "-s", owner], cwd=REPO, env=env, capture_output=True,
                       timeout=120, check=False)
    try:
        result = subprocess.run([str(BIN / "molecule"), "test", "-s", scenario], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, check=False)
        left_behind = [vmid for vmid in SCENARIO_CONTAINERS if rig.lxc_exists(vmid)]
        rig_up = rig.pct_is_ours()
    finally:
        # Whatever happened, leave none of the scenario's containers behind (destroy normally did it already).
        shared_rig.remove(SCENARIO_CONTAINERS)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    # destroy took the scenario's containers down and left the session's rig up for the next user.
    assert left_behind == [] and rig_up
