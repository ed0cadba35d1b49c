# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a set of generated files (launch scripts) atomically, reporting which changed.

Stdlib only: runs on the GPU host inside the module.
"""

import hashlib
import os
import stat

from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    read_settings,
    script_credentials,
    setting_changes,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.safe_files import (
    read_no_follow,
    write_atomic,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text


class ScriptError(Exception):
    """Scripts could not be written; ``details`` go into the module result next to the message."""

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.details = details


def secrets_of(scripts, secrets):
    """``secrets`` (the API keys) and every credential ``scripts`` hold (HF_TOKEN=..., --hf-token ...): what a
    module hides by value, and what makes its scripts secret."""
    return list(secrets) + [value for script in scripts for value in script_credentials(script["content"])]


def read_script(path):
    """``(sha256 of its bytes, its text)`` of a launch script on disk."""
    with open(path, "rb") as handle:
        data = handle.read()
    return hashlib.sha256(data).hexdigest(), data.decode("utf-8", "replace")


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_current(path):
    """(content, mode) of an existing regular file, or (None, None) when absent.

    A symbolic link counts as absent: it is never read through (a diff would show its target) and the
    write replaces the link itself.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, None
    if stat.S_ISLNK(info.st_mode):
        return None, None
    if not stat.S_ISREG(info.st_mode):
        raise IsADirectoryError(f"{path} exists and is not a regular file")
    return read_no_follow(path).decode("utf-8", "surrogateescape"), stat.S_IMODE(info.st_mode)


def plan_file(path, content, mode):
    """What writing ``content`` with ``mode`` to ``path`` would change."""
    before, before_mode = read_current(path)
    return {
        "path": path,
        "before": before,
        "content_changed": before != content,
        "mode_changed": before_mode is not None and before_mode != mode,
        "sha256": sha256_text(content),
    }


def sync_file(path, content, mode, directory_mode, check_mode):
    """Bring one file to ``content``/``mode``; returns the plan (with ``changed``).

    A mode change alone rewrites the file too: a chmod by name could follow a link swapped in meanwhile.
    """
    plan = plan_file(path, content, mode)
    plan["changed"] = plan["content_changed"] or plan["mode_changed"]
    if check_mode or not plan["changed"]:
        return plan
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, directory_mode)
    # Never half-written: a server must not exec a truncated script.
    write_atomic(path, content, mode)
    return plan


def sync_scripts(scripts, mode, directory_mode, required_paths, secrets, check_mode):
    """Write every ``{"name", "path", "content"}`` of ``scripts``: ``(results by name, diffs)``.

    Nothing is written unless every script name and path is unique and every ``required_paths`` entry
    (model directories) exists. Diffs (changed content only) are scrubbed of ``secrets`` and of every
    API key flag value, the previous key of a rotation included. Raises ScriptError.
    """
    names = [script["name"] for script in scripts]
    paths = [script["path"] for script in scripts]
    if len(set(names)) != len(names) or len(set(paths)) != len(paths):
        raise ScriptError(f"script names and paths must be unique, got {', '.join(sorted(paths))}")
    missing = [path for path in required_paths if not os.path.exists(path)]
    if missing:
        raise ScriptError(f"required path(s) missing on the host, nothing written: {', '.join(missing)}",
                          missing_paths=missing)
    results, diffs = {}, []
    for script in scripts:
        try:
            plan = sync_file(script["path"], script["content"], mode, directory_mode, check_mode)
        except OSError as error:
            raise ScriptError(f"cannot write {script['path']}: {scrub_text(str(error), secrets)}", scripts=results)
        results[script["name"]] = {"path": script["path"], "changed": plan["changed"], "sha256": plan["sha256"]}
        if plan["content_changed"] and plan["before"] is not None:
            # The launch settings it changes (credentials hidden): what a check-mode summary says would change.
            results[script["name"]]["settings_changed"] = setting_changes(
                read_settings(plan["before"], secrets), read_settings(script["content"], secrets))
        if plan["content_changed"]:
            diffs.append({
                "before_header": script["path"] if plan["before"] is not None else f"{script['path']} (absent)",
                "after_header": script["path"],
                "before": scrub_text(plan["before"] or "", secrets),
                "after": scrub_text(script["content"], secrets),
            })
    return results, diffs
