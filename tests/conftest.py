"""Test tiers and the shared LXC rig.

Every test of an lxc tier (tests/tiers.py) is marked ``lxc``: `make test` runs those one after another on the one rig
of the ``shared_rig`` fixture, and every other test in parallel workers; `make check` runs only the others.
"""

import os

import pytest

from tests.rig import rig, shared
from tests.tiers import tier_of, tier_rank

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(items):
    # The heaviest tiers first (stable: files keep their order inside a tier). pytest-xdist hands out whole files in
    # this order (make: --no-loadscope-reorder; its own reorder put the files of fewest tests - the slowest integration
    # files - last), so the many small simulator and unit files fill the workers' tails.
    items.sort(key=lambda item: tier_rank(os.path.relpath(str(item.path), REPO)))
    for item in items:
        path = os.path.relpath(str(item.path), REPO)
        _tier, lxc = tier_of(path)
        if lxc:
            item.add_marker(pytest.mark.lxc)
        elif "shared_rig" in getattr(item, "fixturenames", ()):
            raise pytest.UsageError(f"{item.nodeid} uses the shared LXC rig but {path} is not an lxc tier of "
                                    "tests/tiers.py: it would run in a parallel worker beside the rig's other users")


@pytest.fixture(scope="session")
def shared_rig():
    """The session's LXC rig (tests/rig/shared.py): up once, containers added and removed by each user."""
    reason = rig.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with shared.session_rig() as session:
        yield session
