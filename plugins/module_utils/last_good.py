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
import shlex
import stat
import time

from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    LAST_GOOD_GENERATIONS,
    LAST_GOOD_SUFFIXES,
    last_good_dir,
    last_good_file,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.safe_files import (
    read_json_object,
    read_no_follow,
    write_atomic,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.script_files import (
    sha256_text,
)

SCRIPT_MODE = 0o700
# A generation is a script and its record; the one before the current one is PREVIOUS.
SCRIPT, RECORD = LAST_GOOD_SUFFIXES
PREVIOUS = LAST_GOOD_GENERATIONS[1]
API_KEY_FLAG = "--api-key"
# What SGLang's argparse takes for --api-key (a unique prefix, down to --api): a script holding one of these is not
# re-keyed by rewriting --api-key alone.
_API_KEY_SPELLINGS = frozenset(API_KEY_FLAG[:length] for length in range(len("--api"), len(API_KEY_FLAG) + 1))


class UntrustedFile(OSError):
    """A last good file or directory that someone else could have written: never executed."""


def _check_trusted(path, directory=False):
    """UntrustedFile unless ``path`` is a directory (or a regular file) of this user, no link, not writable by group
    or others: a last good script is executed as this user, so only this user may have written it."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        problem = f"a symbolic link (to {os.readlink(path)})"
    elif not (stat.S_ISDIR if directory else stat.S_ISREG)(info.st_mode):
        problem = "not a directory" if directory else "not a regular file"
    elif info.st_uid != os.geteuid():
        problem = f"owned by uid {info.st_uid}, not by uid {os.geteuid()} that runs the servers"
    elif info.st_mode & 0o022:
        problem = f"writable by group or others (mode {oct(info.st_mode & 0o777)})"
    else:
        return
    raise UntrustedFile(f"{path} is {problem}; refusing to use a last good configuration there: remove it")


def _check_trusted_files(state_dir, name):
    """The last good directory and every file of ``name`` in it that exists (UntrustedFile otherwise)."""
    directory = last_good_dir(state_dir)
    if os.path.lexists(directory):
        _check_trusted(directory, directory=True)
    for generation in LAST_GOOD_GENERATIONS:
        for suffix in LAST_GOOD_SUFFIXES:
            if os.path.lexists(last_good_file(state_dir, name, suffix, generation)):
                _check_trusted(last_good_file(state_dir, name, suffix, generation))


def _exec_command(text):
    """``(lines, first, last, argv)`` of the script's ``exec`` command (first and last line, continuations
    included), or None when it has none or its quoting does not parse."""
    lines = text.split("\n")
    first = next((index for index, line in enumerate(lines) if line.lstrip().startswith("exec ")), None)
    if first is None:
        return None
    last = first
    while lines[last].endswith("\\") and last + 1 < len(lines):
        last += 1
    try:
        argv = shlex.split(" ".join(line.rstrip("\\") for line in lines[first:last + 1]))
    except ValueError:
        return None
    return lines, first, last, argv


def _api_key_in(argv):
    """The value after the last ``--api-key`` of ``argv`` (None: none)."""
    keyed = [index for index, arg in enumerate(argv[:-1]) if arg == API_KEY_FLAG]
    return argv[keyed[-1] + 1] if keyed else None


def with_api_key(text, api_key):
    """``(script, rekeyed)``: the launch script ``text`` running with ``api_key`` (None: no key) - as it is when it
    already does - or ``(None, False)`` when its command cannot be rewritten safely (no ``exec``, unbalanced
    quotes, an abbreviated or valueless key flag).

    Only the exec command is rewritten, in the form the launch_scripts role renders it (each flag on its own line,
    shell-quoted), so a rendered script comes out as the role would render it with ``api_key``."""
    parsed = _exec_command(text)
    if parsed is None:
        return None, False
    lines, first, last, argv = parsed
    keyed = [index for index, arg in enumerate(argv) if arg.split("=", 1)[0] in _API_KEY_SPELLINGS]
    if any(argv[index] != API_KEY_FLAG or index + 1 == len(argv) for index in keyed):
        return None, False
    if _api_key_in(argv) == api_key:
        return text, False
    for index in reversed(keyed):
        del argv[index:index + 2]
    if api_key is not None:
        argv += [API_KEY_FLAG, api_key]
    indent = lines[first][:len(lines[first]) - len(lines[first].lstrip())]
    command = indent + "exec" + "".join((" \\\n    " if arg.startswith("--") else " ") + shlex.quote(arg)
                                        for arg in argv[1:])
    return "\n".join(lines[:first] + [command] + lines[last + 1:]), True


def _rotate(state_dir, name):
    """The current generation becomes the previous one (both files, the script first)."""
    for suffix in LAST_GOOD_SUFFIXES:
        try:
            os.replace(last_good_file(state_dir, name, suffix), last_good_file(state_dir, name, suffix, PREVIOUS))
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
    try:
        _check_trusted_files(state_dir, name)
        current = record(state_dir, name)
        os.makedirs(last_good_dir(state_dir), 0o700, exist_ok=True)
        if current and current.get("script_sha256") != recorded:
            _rotate(state_dir, name)
            _rekey_previous(state_dir, name, text)
        if not current or current.get("script_sha256") != recorded or _script(state_dir, name, "") != text:
            write_atomic(last_good_file(state_dir, name, SCRIPT), text, SCRIPT_MODE)
        write_atomic(last_good_file(state_dir, name, RECORD), json.dumps({
            "run_id": run_id, "time": round(now or time.time(), 3), "script_sha256": recorded,
            "launch_script": script_path}, sort_keys=True), 0o644)
    except OSError as exc:
        return f"cannot keep the last good configuration of {name} in {state_dir}: {exc}"
    return None


def _rekey_previous(state_dir, name, text):
    """The generation before holds the key ``text`` (the new last good script) has: a key rotated away is not kept
    on disk, and a rollback to it would not bring it back. One that cannot be re-keyed is dropped."""
    previous = _script(state_dir, name, PREVIOUS)
    parsed = _exec_command(text)
    rekeyed, changed = with_api_key(previous, _api_key_in(parsed[3] if parsed else [])) if previous is not None \
        else (None, False)
    if rekeyed is None:
        for suffix in LAST_GOOD_SUFFIXES:
            try:
                os.unlink(last_good_file(state_dir, name, suffix, PREVIOUS))
            except FileNotFoundError:
                pass
    elif changed:
        write_atomic(last_good_file(state_dir, name, SCRIPT, PREVIOUS), rekeyed, SCRIPT_MODE)
        write_atomic(last_good_file(state_dir, name, RECORD, PREVIOUS), json.dumps(dict(
            record(state_dir, name, PREVIOUS), script_sha256=sha256_text(rekeyed)), sort_keys=True), 0o644)


def record(state_dir, name, generation=""):
    """``{run_id, time, script_sha256, launch_script}`` of the server's last good configuration, or None."""
    found = read_json_object(last_good_file(state_dir, name, RECORD, generation))
    return found if found and found.get("script_sha256") else None


def came_up_with(state_dir, name, script_sha256):
    """Whether server ``name`` came up with the launch script of ``script_sha256`` on this host (one of its last good
    generations) - a configuration that needs no canary."""
    return any((record(state_dir, name, generation) or {}).get("script_sha256") == script_sha256
               for generation in LAST_GOOD_GENERATIONS)


def _script(state_dir, name, generation):
    found = record(state_dir, name, generation)
    if not found:
        return None
    try:
        text = read_no_follow(last_good_file(state_dir, name, SCRIPT, generation)).decode("utf-8", "surrogateescape")
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
    UntrustedFile when the last good files could have been written by someone else.
    """
    _check_trusted_files(state_dir, name)
    for generation in LAST_GOOD_GENERATIONS:
        found, text = record(state_dir, name, generation), _script(state_dir, name, generation)
        leaves_it = found is not None and found["script_sha256"] == leaving_sha256 and (
            run_id is None or found.get("run_id") == run_id)
        if text is not None and not leaves_it:
            return found, text
    return None, None
