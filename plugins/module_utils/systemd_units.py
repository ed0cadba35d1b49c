# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systemd units that launchers.py runs servers in: their text, and the paths they cannot hold.

Pure (no systemctl, no file is read or written), so a unit is tested as text without systemd. A unit is named
after the deployment (its state dir) and the server, ``gpuops-sglang-<deployment id>-<name>.service``
(naming.unit_name): two deployments on one host may both have a server gpu0. Its Environment line
(``deployment_line``) is how a unit file is known as this deployment's.
"""

import hashlib
import os
import re

from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    DEPLOYMENT_VAR,
    MARKER_VAR,
    unit_name,
)

# Characters a path in a unit may not hold: systemd splits on whitespace, unquotes and expands '$'; '%' is escaped.
_UNSAFE_IN_UNIT = re.compile(r"[\s\"'\\;$]")


def deployment_line(name, state_dir):
    """The unit's Environment line: the marker and the deployment, by which a unit file is known as ours."""
    return f"Environment={MARKER_VAR}={_escaped(name)} {DEPLOYMENT_VAR}={_escaped(state_dir)} SPT_NOENV=1"


def _escaped(value):
    return value.replace("%", "%%")


def _seconds(value):
    # TimeoutStopSec=0 would mean "never": the shortest span systemd takes instead.
    return f"{max(round(value * 1000), 1)}ms"


def unit_problems(where, spec, state_dir):
    """Paths systemd would split, unquote or expand (a unit has no safe quoting for them), or take as relative."""
    paths = (("launch_script", spec.get("launch_script")), ("log_path", spec.get("log_path")), ("state_dir", state_dir))
    return [f"{where}.{key} {value!r} cannot be used in a systemd unit (an absolute path without whitespace, quotes, "
            "backslashes, ';' or '$'): choose another path or sglang_launcher: detached"
            for key, value in paths if value and (_UNSAFE_IN_UNIT.search(value) or not os.path.isabs(value))]


def render_unit(name, launch_script, log_path, state_dir, stop_timeout, options):
    """The unit of one server, from the same settings the detached launcher uses."""
    restart = options["restart"]
    lines = [
        (f"# Written by gpuops.sglang.server for the deployment at {_escaped(state_dir)} as "
         f"{unit_name(name, state_dir)}; edits are replaced at the next relaunch."),
        f"# Starts at boot: {'yes' if options['enabled'] else 'no'}.",
        "[Unit]",
        f"Description=SGLang server {name} (gpuops.sglang)",
        "After=network-online.target",
        "Wants=network-online.target",
        f"StartLimitIntervalSec={_seconds(options['start_limit_interval'])}",
        f"StartLimitBurst={options['start_limit_burst']}",
        "",
        "[Service]",
        # exec: `systemctl start` fails when the script cannot be executed, instead of a silent crash.
        "Type=exec",
        f"ExecStart={_escaped(launch_script)}",
        f"WorkingDirectory={_escaped(os.path.dirname(launch_script) or '/')}",
        deployment_line(name, state_dir),
        "StandardInput=null",
        f"StandardOutput=append:{_escaped(log_path)}",
        "StandardError=inherit",
        # Every process of the server is in the unit's cgroup and goes with it: none can be orphaned.
        "KillMode=control-group",
        "KillSignal=SIGTERM",
        f"TimeoutStopSec={_seconds(stop_timeout)}",
        f"Restart={restart}",
    ]
    if restart != "no":
        lines.append(f"RestartSec={_seconds(options['restart_sec'])}")
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def unit_sha256(content):
    return hashlib.sha256(content.encode("utf-8")).hexdigest()
