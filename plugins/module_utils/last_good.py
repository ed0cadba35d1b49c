# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each server's last good configuration: a copy of the launch script it ran when it last reached ready.

``<state_dir>/last-good/<name>.sh`` (0700: a script may hold the API key) and ``<name>.json`` (the run it came
up in: ``run_id``, ``time``, ``script_sha256``, ``launch_script``), and the generation before it as
``<name>.previous.sh``/``.json``. Written by the wait when a server is ready, and only when the script on disk is
the one the server runs (a hand edit since the launch is not what came up); a later failed run never touches it, a
reboot keeps it. A rollback (gpuops.sglang.server ``rollback``) launches the newest one that is not the script it
rolls back from - a configuration that came up but was rolled back anyway (a canary whose throughput regressed)
goes back to the one before it - and restores it as the server's launch script.
"""

import json
import os
import time

from ansible_collections.gpuops.sglang.plugins.module_utils.safe_files import (
    read_json_object,
    read_no_follow,
    write_atomic,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.script_files import (
    sha256_text,
)

LAST_GOOD_DIR = "last-good"
SCRIPT_MODE = 0o700
GENERATIONS = ("", ".previous")


def _path(state_dir, name, suffix):
    return os.path.join(state_dir, LAST_GOOD_DIR, name + suffix)


def _rotate(state_dir, name):
    """The current generation becomes the previous one (both files, the script first)."""
    for suffix in (".sh", ".json"):
        try:
            os.replace(_path(state_dir, name, suffix), _path(state_dir, name, ".previous" + suffix))
        except FileNotFoundError:
            pass


def keep(state_dir, name, state, run_id, now=None):
    """Record the script of ``state`` (the server's state file) as its last good one; returns why not, or None."""
    script_path, recorded = (state or {}).get("launch_script"), (state or {}).get("script_sha256")
    if not script_path or not recorded:
        return "no launch script recorded"
    try:
        text = read_no_follow(script_path).decode("utf-8", "surrogateescape")
    except OSError as exc:
        return f"cannot read {script_path}: {exc}"
    if sha256_text(text) != recorded:
        return f"{script_path} changed since the launch; the script that came up is not on disk"
    current = record(state_dir, name)
    try:
        os.makedirs(os.path.join(state_dir, LAST_GOOD_DIR), 0o700, exist_ok=True)
        if current and current.get("script_sha256") != recorded:
            _rotate(state_dir, name)
        if not current or current.get("script_sha256") != recorded or _script(state_dir, name, "") != text:
            write_atomic(_path(state_dir, name, ".sh"), text, SCRIPT_MODE)
        write_atomic(_path(state_dir, name, ".json"), json.dumps({
            "run_id": run_id, "time": round(now or time.time(), 3), "script_sha256": recorded,
            "launch_script": script_path}, sort_keys=True), 0o644)
    except OSError as exc:
        return f"cannot keep the last good configuration of {name} in {state_dir}: {exc}"
    return None


def record(state_dir, name, generation=""):
    """``{run_id, time, script_sha256, launch_script}`` of the server's last good configuration, or None."""
    found = read_json_object(_path(state_dir, name, generation + ".json"))
    return found if found and found.get("script_sha256") else None


def _script(state_dir, name, generation):
    found = record(state_dir, name, generation)
    if not found:
        return None
    try:
        text = read_no_follow(_path(state_dir, name, generation + ".sh")).decode("utf-8", "surrogateescape")
    except OSError:
        return None
    return text if sha256_text(text) == found["script_sha256"] else None


def script(state_dir, name):
    """The text of the last good launch script, or None (absent, unreadable or not the recorded one)."""
    return _script(state_dir, name, "")


def rollback_target(state_dir, name, leaving_sha256=None, run_id=None):
    """``(record, script text)`` of the newest intact last good configuration, or ``(None, None)``.

    Not the script being rolled back from (``leaving_sha256``) when this run (``run_id``) made it last good: a
    canary that came up, then regressed. The same script kept by an earlier run is good: a rank of a multi-node
    group whose own configuration did not change, stopped because a peer's failed, goes back to it.
    """
    for generation in GENERATIONS:
        found, text = record(state_dir, name, generation), _script(state_dir, name, generation)
        leaves_it = found is not None and found["script_sha256"] == leaving_sha256 and (
            run_id is None or found.get("run_id") == run_id)
        if text is not None and not leaves_it:
            return found, text
    return None, None
