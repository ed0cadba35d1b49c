# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a launch script sets - the SGLang flags and the exported environment - read from the script itself.

The script is what the server runs (also after a reboot or a hand edit), so the run journal records its
settings from it rather than from the variables that rendered it. Pure functions; credentials never leave
here (``read_settings`` hides them, secrets.py says what they are) except as ``script_credentials``, for the
modules to hide them by value.
"""

import re
import shlex

from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import (
    REDACTED,
    argv_credentials,
    credential_name,
    scrub_argv,
    scrub_text,
)

_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def _logical_lines(text):
    """Lines with backslash-newline continuations joined, as the shell reads them."""
    return text.replace("\\\n", " ").splitlines()


def _flags(argv):
    """``{"--flag": value}``; a flag without a value maps to True, several values are joined by spaces."""
    flags = {}
    current = None
    for arg in argv:
        if arg.startswith("--"):
            name, separator, value = arg.partition("=")
            current = name
            flags[name] = value if separator else True
        elif current is not None:
            before = flags[current]
            flags[current] = arg if before is True else f"{before} {arg}"
    return flags


def _exports_and_argv(script_text):
    """``({name: value}, argv of the exec or None)`` as the shell would see them, nothing hidden."""
    env, argv = {}, None
    for line in _logical_lines(script_text):
        export = _EXPORT.match(line)
        if export:
            name, raw = export.groups()
            try:
                words = shlex.split(raw)
            except ValueError:
                words = [raw]
            env[name] = " ".join(words)
            continue
        stripped = line.strip()
        if stripped.startswith("exec "):
            try:
                argv = shlex.split(stripped)[1:]
            except ValueError:
                return env, None
    return env, argv


def read_settings(script_text, secrets=()):
    """``{"command": [...], "flags": {...}, "env": {...}}`` of a launch script, or None when it has no ``exec``.

    ``command`` is the argv before the first flag (``python3 -m sglang.launch_server``).
    """
    env, argv = _exports_and_argv(script_text)
    if argv is None:
        return None
    env = {name: REDACTED if credential_name(name) else scrub_text(value, secrets) for name, value in env.items()}
    argv = [scrub_text(arg, secrets) for arg in scrub_argv(argv)]
    first_flag = next((index for index, arg in enumerate(argv) if arg.startswith("--")), len(argv))
    return {"command": argv[:first_flag], "flags": _flags(argv[first_flag:]), "env": env}


def script_credentials(script_text):
    """The credentials a launch script holds: values of its credential exports and flags (the API key included)."""
    env, argv = _exports_and_argv(script_text)
    return [value for name, value in env.items() if credential_name(name) and value] + argv_credentials(argv or [])


def model_of(settings):
    """The model a launch runs (its --model-path, or --model), or None."""
    flags = (settings or {}).get("flags") or {}
    return flags.get("--model-path") or flags.get("--model")


def gpus_of(settings):
    """The GPUs a launch runs on (its CUDA_VISIBLE_DEVICES, as written), or None."""
    return ((settings or {}).get("env") or {}).get("CUDA_VISIBLE_DEVICES")


def node_rank_of(settings):
    """The --node-rank of a launch (a node of a multi-node group), or None when it has none or it is no number."""
    rank = ((settings or {}).get("flags") or {}).get("--node-rank")
    return int(rank) if isinstance(rank, str) and rank.isdigit() else None


def setting_changes(before, after):
    """What differs between two settings, flags first: ``[{"setting", "before", "after"}]`` (None = not set)."""
    changes = []
    before, after = before or {}, after or {}
    if before.get("command") != after.get("command") and before.get("command") is not None:
        changes.append({"setting": "command", "before": " ".join(before["command"]),
                        "after": " ".join(after.get("command") or [])})
    for kind in ("flags", "env"):
        old, new = before.get(kind) or {}, after.get(kind) or {}
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                changes.append({"setting": name, "before": old.get(name), "after": new.get(name)})
    return changes


def change_text(change):
    """``--mamba-scheduler-strategy extra_buffer -> no_buffer``; a flag without value shows as on/off."""
    def shown(value):
        if value is None:
            return "(unset)"
        return "on" if value is True else str(value)
    return f"{change['setting']} {shown(change['before'])} -> {shown(change['after'])}"
