"""The test budget's guard (docs/testing.md): the expensive bring-ups stay shared.

`make test` fits its time only because every LXC test runs on the one rig of tests/rig/shared.py and every molecule
scenario adds its containers to that rig through molecule/shared's create and destroy. These checks fail when a new
test or scenario brings up a rig of its own; they read files, never time anything. (tests/conftest.py refuses, at
collection, a test outside the lxc tiers that asks for the shared rig.)
"""

import re
from pathlib import Path

import pytest
import yaml

from tests.integration.test_molecule import SCENARIO_CONTAINERS
from tests.tiers import tier_rank

REPO = Path(__file__).resolve().parents[2]
# The only code that may bring a rig up or take it down as a whole.
RIG_OWNERS = {"tests/rig/rig.py", "tests/rig/shared.py"}
RIG_LIFECYCLE = re.compile(r"\brig\.(up|down|purge|setup)\(")
SHARED_CREATE, SHARED_DESTROY = "../shared/create.yml", "../shared/destroy.yml"
SCENARIOS = sorted(path.parent for path in (REPO / "molecule").glob("*/molecule.yml"))


def test_no_test_brings_up_a_rig_of_its_own():
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative in RIG_OWNERS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if RIG_LIFECYCLE.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert not offenders, ("bring containers up through the shared_rig fixture (tests/rig/shared.py), not a rig of "
                           "their own:\n" + "\n".join(offenders))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
def test_every_molecule_scenario_uses_the_shared_bring_up(scenario):
    config = yaml.safe_load((scenario / "molecule.yml").read_text())
    playbooks = config.get("ansible", {}).get("playbooks", {})
    if config.get("shared_state"):
        # The default scenario's create/destroy serve it; a scenario of the family may not bring its own.
        assert playbooks.get("create", SHARED_CREATE) == SHARED_CREATE
        assert playbooks.get("destroy", SHARED_DESTROY) == SHARED_DESTROY
    else:
        assert (playbooks.get("create"), playbooks.get("destroy")) == (SHARED_CREATE, SHARED_DESTROY)
    # Only containers that tests/integration/test_molecule.py takes down again, whatever happens in the run; the
    # default scenario's create brings up those of its family.
    owner = REPO / "molecule" / "default" if config.get("shared_state") else scenario
    up_args = yaml.safe_load((owner / "molecule.yml").read_text())["ansible"]["env"]["MOLECULE_RIG_UP_ARGS"]
    containers = [int(vmid) for vmid in re.search(r"--containers (\S+)", up_args).group(1).split(",")]
    assert set(containers) <= set(SCENARIO_CONTAINERS), up_args


def test_the_parallel_workers_get_the_heaviest_tiers_first():
    ranks = [tier_rank(path) for path in ("tests/integration/test_rollback.py", "tests/simulator/test_sim_load.py",
                                          "tests/unit/test_test_tiers.py", "tests/elsewhere.py")]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
