# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL tuning for launch scripts: named profiles and validation against what NCCL accepts.

Values follow the NVIDIA NCCL environment variable documentation. A bad value never reaches a
launch script: NCCL silently falls back to defaults (or hangs) on many of them.
"""

from __future__ import annotations

import re

# PCIe-only hosts (no NVLink): ring all-reduce over the low-latency protocol, P2P across the
# whole system, big buffers and full thread blocks.
PROFILES = {
    "none": {},
    "pcie": {
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Ring",
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    },
}

P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("Tree", "Ring", "Collnet", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
NTHREADS = ("64", "128", "256", "512")
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")

_NAME_RE = re.compile(r"^NCCL_[A-Z0-9_]+$")


class NcclError(ValueError):
    """A user-facing message naming the bad value and what would be accepted."""


def _as_text(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value).strip()


def _check_choice(name, value, choices):
    for choice in choices:
        if value.upper() == choice.upper():
            return choice
    raise NcclError(f"{name}={value!r} is not valid; use one of {', '.join(choices)}")


def _check_list(name, value, choices):
    """NCCL_PROTO / NCCL_ALGO: comma list, case-insensitive, optional leading ^ (exclude)."""
    body = value.removeprefix("^")
    items = [item.strip() for item in body.split(",")]
    if not body or any(not item for item in items):
        raise NcclError(
            f"{name}={value!r} is not valid; use a comma list of {', '.join(choices)}, optionally prefixed with ^ to exclude"
        )
    for item in items:
        if item.upper() not in (choice.upper() for choice in choices):
            raise NcclError(
                f"{name}={value!r}: {item!r} is not valid; use a comma list of {', '.join(choices)}, "
                "optionally prefixed with ^ to exclude"
            )
    return value


def _check_positive_int(name, value, maximum=None):
    if not value.isdigit() or int(value) <= 0 or (maximum is not None and int(value) > maximum):
        bound = f" up to {maximum}" if maximum is not None else ""
        raise NcclError(f"{name}={value!r} is not valid; use a positive integer{bound}")
    return value


def _check_p2p_level(name, value):
    if value.isdigit() and 0 <= int(value) <= 5:
        return value
    try:
        return _check_choice(name, value, P2P_LEVELS)
    except NcclError:
        raise NcclError(
            f"{name}={value!r} is not valid; use one of {', '.join(P2P_LEVELS)} or a legacy level 0-5"
        ) from None


def _check_flag(name, value):
    return _check_choice(name, value, ("0", "1"))


_VALIDATORS = {
    "NCCL_P2P_LEVEL": _check_p2p_level,
    "NCCL_PROTO": lambda name, value: _check_list(name, value, PROTOCOLS),
    "NCCL_ALGO": lambda name, value: _check_list(name, value, ALGORITHMS),
    "NCCL_NTHREADS": lambda name, value: _check_choice(name, value, NTHREADS),
    "NCCL_BUFFSIZE": _check_positive_int,
    "NCCL_MAX_NCHANNELS": _check_positive_int,
    "NCCL_MIN_NCHANNELS": lambda name, value: _check_positive_int(name, value, maximum=32),
    "NCCL_DEBUG": lambda name, value: _check_choice(name, value, DEBUG_LEVELS),
    "NCCL_P2P_DISABLE": _check_flag,
    "NCCL_SHM_DISABLE": _check_flag,
    "NCCL_IB_DISABLE": _check_flag,
    "NCCL_CUMEM_ENABLE": _check_flag,
    "NCCL_NVLS_ENABLE": _check_flag,
}


def validate_nccl_env(env):
    """Return ``{NAME: value}`` (strings, choices in NCCL's spelling) or raise NcclError."""
    if not isinstance(env, dict):
        raise NcclError(f"NCCL settings must be a profile name ({', '.join(sorted(PROFILES))}) "
                        f"or a dict of NCCL_* variables, got {env!r}")
    validated = {}
    for name, raw in env.items():
        if not _NAME_RE.match(str(name)):
            raise NcclError(f"{name!r} is not an NCCL variable; names look like NCCL_PROTO, NCCL_ALGO, ...")
        value = _as_text(raw)
        validator = _VALIDATORS.get(name)
        validated[name] = validator(name, value) if validator else value
    return validated


def _profile(name):
    if name not in PROFILES:
        raise NcclError(f"unknown NCCL profile {name!r}; use one of {', '.join(sorted(PROFILES))} "
                        "or a dict of NCCL_* variables")
    return dict(PROFILES[name])


def resolve_nccl(setting):
    """NCCL env from a profile name (``pcie``, ``none``), None, or a dict of NCCL_* variables.

    A dict may name a base ``profile`` and override single variables of it.
    """
    if setting is None:
        return {}
    if isinstance(setting, str):
        return _profile(setting)
    if isinstance(setting, dict) and "profile" in setting:
        overrides = dict(setting)
        env = _profile(overrides.pop("profile"))
        env.update(validate_nccl_env(overrides))
        return env
    return validate_nccl_env(setting)
