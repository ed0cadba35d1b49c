"""The one LXC rig of a test session: every test of the lxc tiers (tests/tiers.py) runs on it.

Bringing the rig up (sshd, the pct stand-in, the bridge) happens once per session, in rig.py's default work dir so
that molecule's create and destroy (molecule/shared) find it; each user adds the containers it needs (overlay
snapshots of the cached base container: instant) and removes them when done, so every test module and molecule
scenario still starts from fresh containers. tests/unit/test_test_tiers.py fails when a test brings up a rig of
its own or a molecule scenario brings its own create/destroy: a new test joins this fixture instead.

Used through the ``shared_rig`` fixture of tests/conftest.py.
"""

import contextlib
import os

from ..ports import free_port
from . import rig

# Containers of tests/rig come from this range (molecule scenarios use 200 and up).
TEST_VMIDS = range(9900, 10000)


class SharedRig:
    """The session's rig: ``workdir``, ``port``, and containers added and removed by its users."""

    def __init__(self, workdir, port):
        self.workdir = str(workdir)
        self.port = port

    def add(self, vmids, gpus, inventory):
        """Containers ``vmids`` with ``gpus`` fake GPUs each, up and on the rig's bridge; returns the rig state with
        ``inventory`` (a path) listing only these containers."""
        state = rig.up(vmids, gpus=gpus, workdir=self.workdir, port=self.port, network=True)
        own = dict(state, containers=list(vmids), inventory=str(inventory))
        rig.write_inventory(rig.Paths(self.workdir), own, output=inventory)
        return own

    def remove(self, vmids):
        rig.down(self.workdir, containers=list(vmids))

    def unused_vmid(self):
        return next(vmid for vmid in TEST_VMIDS if not rig.lxc_exists(vmid))

    @contextlib.contextmanager
    def container(self, gpus, inventory):
        """One fresh container for a test module: ``(vmid, state)``; destroyed afterwards."""
        vmid = self.unused_vmid()
        try:
            yield vmid, self.add([vmid], gpus, inventory)
        finally:
            self.remove([vmid])
        assert not rig.lxc_exists(vmid)


@contextlib.contextmanager
def session_rig():
    """Up for the block, then down; afterwards nothing of it is left but the cached base container."""
    shared = SharedRig(rig.DEFAULT_WORKDIR, free_port())
    try:
        rig.up([], workdir=shared.workdir, port=shared.port, network=True)
        yield shared
    finally:
        left = (rig.read_state(rig.Paths(shared.workdir)) or {}).get("containers", [])
        rig.down(shared.workdir)
    assert not rig.PCT_PATH.exists() and not os.path.exists(shared.workdir)
    assert not any(rig.lxc_exists(vmid) for vmid in left), f"containers left behind: {left}"
