# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which SGLang a server's interpreter would run: the ``sglang`` distribution's metadata in its environment.

Read by that interpreter itself (its sys.path is what the server gets), through importlib.metadata - sglang is never
imported (that takes seconds and wants a GPU) - and within a deadline (a hung NFS site-packages must not stall the
run). The answer for each interpreter is ``{"interpreter", "version", "location"}`` with ``version`` None and a
``problem`` sentence where there is no sglang or the interpreter cannot say.
"""

import json
import shutil

from ansible_collections.gpuops.sglang.plugins.module_utils.bounded_command import (
    CommandNotRun,
    CommandTimedOut,
    run_bounded,
)

READ_TIMEOUT_SECONDS = 20
# Runs in the server's interpreter: any Python >= 3.8 (importlib.metadata).
_READER = """
import json
from importlib import metadata
try:
    dist = metadata.distribution("sglang")
except metadata.PackageNotFoundError:
    print(json.dumps({"version": None}))
else:
    print(json.dumps({"version": dist.version, "location": str(dist.locate_file(""))}))
"""


def installed_sglang(interpreter, timeout=READ_TIMEOUT_SECONDS, run=run_bounded):
    """What ``interpreter`` (a path or a name on PATH) has installed of sglang."""
    found = {"interpreter": interpreter, "version": None}
    path = shutil.which(interpreter)
    if path is None:
        return dict(found, problem=f"{interpreter} (the server command's interpreter) is not found on this host")
    try:
        # -I would drop PYTHONPATH and the user site, which the server itself may rely on; only the cwd is kept out.
        rc, stdout, stderr = run([path, "-c", _READER], timeout)
    except (CommandNotRun, CommandTimedOut) as exc:
        return dict(found, problem=f"cannot read the SGLang version with {interpreter}: {exc}")
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


def installed_sglang_of(interpreters, timeout=READ_TIMEOUT_SECONDS, run=run_bounded):
    """:func:`installed_sglang` of each distinct interpreter, in the order given."""
    return [installed_sglang(interpreter, timeout, run) for interpreter in dict.fromkeys(interpreters)]
