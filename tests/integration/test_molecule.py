"""Every molecule scenario (molecule/<name>) end to end: `molecule test -s <name>`.

Each run brings up the LXC rig (tests/rig: real containers reached through
community.proxmox.proxmox_pct_remote), converges, verifies with testinfra and tears the rig down.
The first run on a machine builds the rig's base container (about 75 s); later runs clone it.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "rig"))
import rig  # tests/rig is not a package

BIN = Path(sys.executable).parent
SCENARIOS = sorted(path.parent.name for path in (REPO / "molecule").glob("*/molecule.yml"))
# Scenarios that also run with sglang_launcher: systemd (molecule/shared group_vars read MOLECULE_SGLANG_LAUNCHER).
# faults stays detached: its orphaned scheduler cannot exist under systemd, which molecule/systemd proves.
SYSTEMD_TOO = ("default", "change")
RUNS = [(scenario, "detached") for scenario in SCENARIOS] + [(scenario, "systemd") for scenario in SYSTEMD_TOO]
# Hang guard, not a speed check: a pct exec blocked by a background child never returns.
SCENARIO_TIMEOUT = 1200


def skip_reason():
    if not (BIN / "molecule").exists():
        return f"molecule not found next to {sys.executable}"
    return rig.unavailable_reason()


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


@pytest.mark.parametrize("scenario, launcher", RUNS, ids=[f"{scenario}-{launcher}" for scenario, launcher in RUNS])
def test_scenario(scenario, launcher):
    # molecule runs ansible-config and ansible-playbook from PATH.
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", PY_COLORS="0", ANSIBLE_FORCE_COLOR="0",
               MOLECULE_SGLANG_LAUNCHER=launcher)
    env.pop("MOLECULE_KEEP_RIG", None)
    # Molecule keeps "created"/"prepared" in ~/.ansible/tmp per project path: a run cut short on this machine would
    # make it skip the create of a rig that is gone. Every run starts from no state.
    for owner in sorted({scenario, "default"}):
        subprocess.run([str(BIN / "molecule"), "reset", "-s", owner], cwd=REPO, env=env, capture_output=True,
                       timeout=120, check=False)
    try:
        result = subprocess.run([str(BIN / "molecule"), "test", "-s", scenario], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, check=False)
    finally:
        # Whatever happened, leave no rig behind (destroy normally did it already).
        rig.down()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    assert not rig.PCT_PATH.exists() and not rig.lxc_exists(200) and not rig.lxc_exists(201)
