# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which SGLang a server's interpreter would run: the ``sglang`` distribution's metadata in its environment.

Read by that interpreter itself (its sys.path is what the server gets), through importlib.metadata - sglang is never
imported (that takes seconds and wants a GPU) - and within a deadline (a hung NFS site-packages must not stall the
run). The answer for each interpreter is ``{"interpreter", "version", "location"}`` with ``version`` None and a
``problem`` sentence where there is no sglang or the interpreter cannot say.
"""

import json
import os
import re
import shutil

from ansible_collections.gpuops.sglang.plugins.module_utils.bounded_command import (
    CommandNotRun,
    CommandTimedOut,
    run_bounded,
)

READ_TIMEOUT_SECONDS = 20
# Runs in the server's interpreter: any Python >= 3.8 (importlib.metadata). "python -c" puts the working directory
# first on sys.path: left out, so that a sglang*.dist-info lying there is not taken for the installed one.
_READER = """
import json, sys
sys.path = [entry for entry in sys.path if entry not in ("", ".")]
from importlib import metadata
try:
    dist = metadata.distribution("sglang")
except metadata.PackageNotFoundError:
    print(json.dumps({"version": None}))
else:
    print(json.dumps({"version": dist.version, "location": str(dist.locate_file(""))}))
"""


_PYTHON = re.compile(r"python[\d.]*$")
# What of a launch script's environment decides which Python runs and what it imports: read with it.
INTERPRETER_ENV = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "VIRTUAL_ENV")


def interpreter_env(env):
    """The part of a launch environment (``sglang_env``, a script's exports) that decides the interpreter's SGLang."""
    return {name: str(value) for name, value in (env or {}).items() if name in INTERPRETER_ENV and value is not None}


def _python_of(path):
    """``path`` when it is a Python; the Python of its shebang when it is a script (``sglang``'s console script);
    else None - a word that is no Python (``env``, ``numactl``, a wrapper) is never run with our code."""
    if _PYTHON.match(os.path.basename(path)):
        return path
    try:
        with open(path, "rb") as script:
            first = script.readline(256).decode("utf-8", "replace")
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if words and os.path.basename(words[0]) == "env" and len(words) > 1:
        words = [shutil.which(words[1]) or words[1]]
    return words[0] if words and _PYTHON.match(os.path.basename(words[0])) else None


def installed_sglang(interpreter, timeout=READ_TIMEOUT_SECONDS, run=run_bounded, env=None):
    """What ``interpreter`` (a path, or a name on the PATH) has installed of sglang, run with the launch
    environment's ``env`` (interpreter_env: its PATH, PYTHONPATH, ...) over this module's."""
    found = {"interpreter": interpreter, "version": None}
    environment = dict(os.environ, **interpreter_env(env))
    path = shutil.which(interpreter, path=environment.get("PATH"))
    if path is None:
        return dict(found, problem=f"{interpreter} (the server command's interpreter) is not found on this host")
    python = _python_of(path)
    if python is None:
        return dict(found, problem=f"{interpreter} is not a Python interpreter or a Python script: the SGLang version "
                                   "it runs cannot be read; set sglang_version")
    try:
        # -I would drop PYTHONPATH and the user site, which the server itself may rely on.
        rc, stdout, stderr = run([python, "-c", _READER], timeout, env=environment)
    except CommandTimedOut:
        return dict(found, problem=f"cannot read the SGLang version with {interpreter}: it did not answer within "
                                   f"{timeout:g} s")
    except CommandNotRun as exc:
        cause = getattr(exc.__context__, "strerror", None) or "it could not be run"
        return dict(found, problem=f"cannot read the SGLang version with {interpreter}: {cause}")
    try:
        answer = json.loads(stdout.strip().splitlines()[-1]) if rc == 0 else None
    except (ValueError, IndexError):
        answer = None
    if not isinstance(answer, dict):
        detail = (stderr.strip().splitlines() or ["no answer"])[-1][:200]
        return dict(found, problem=f"cannot read the SGLang version with {interpreter} (is it a Python >= 3.8?): "
                                   f"{detail}")
    if not answer.get("version"):
        return dict(found, problem=f"SGLang is not installed for {interpreter} (no sglang distribution in its "
                                   "environment)")
    return dict(found, version=str(answer["version"]), location=answer.get("location"))


def installed_sglang_of(interpreters, timeout=READ_TIMEOUT_SECONDS, run=run_bounded, env=None):
    """:func:`installed_sglang` of each distinct interpreter, in the order given, with the launch environment
    ``env``."""
    return [installed_sglang(interpreter, timeout, run, env) for interpreter in dict.fromkeys(interpreters)]


def server_versions(settings_by_name, timeout=READ_TIMEOUT_SECONDS, run=run_bounded):
    """``{name: installed_sglang(...)}`` of each server by the interpreter of its launch command (the first word of
    the command its launch script runs) and the environment its script exports; each such pair read once. A server
    with no recorded command is left out."""
    read, versions = {}, {}
    for name, settings in settings_by_name.items():
        interpreter = ((settings or {}).get("command") or [None])[0]
        if not interpreter:
            continue
        env = interpreter_env((settings or {}).get("env"))
        key = (interpreter, tuple(sorted(env.items())))
        if key not in read:
            read[key] = installed_sglang(interpreter, timeout, run, env)
        versions[name] = read[key]
    return versions
