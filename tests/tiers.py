"""The test tiers of `make test`, by path: what runs where, and where its time is reported.

``lxc`` tiers need the LXC rig (root, real containers); they run one after another on the shared rig of
tests/rig/shared.py. Every other tier runs in parallel pytest-xdist workers (`make check` runs those alone).
tests/conftest.py marks each test ``lxc`` from this table; scripts/test_report.py totals the time per tier.
"""

# (path prefix relative to the repository, tier, needs the LXC rig); the first matching prefix wins.
TIERS = (
    ("tests/integration/test_molecule.py", "molecule", True),
    ("tests/rig/", "rig", True),
    ("tests/integration/", "integration", False),
    ("tests/simulator/", "simulator", False),
    ("tests/unit/", "unit", False),
    ("tests/gpu/", "gpu", False),
)


def tier_of(path):
    """``(tier, needs the LXC rig)`` of a test file given relative to the repository."""
    return next(((tier, lxc) for prefix, tier, lxc in TIERS if path.startswith(prefix)), ("other", False))


def tier_rank(path):
    """The position of a test file's tier in TIERS (heaviest first); a path of no tier comes last."""
    return next((rank for rank, (prefix, _tier, _lxc) in enumerate(TIERS) if path.startswith(prefix)), len(TIERS))
