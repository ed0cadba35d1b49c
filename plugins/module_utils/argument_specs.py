# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument specs shared by several modules, each next to the doc fragment that documents it.

``STATE_DIR`` is documented by ``gpuops.sglang.common.state_dir``, ``GPU`` by ``gpuops.sglang.common.gpu``,
``HTTP`` by ``gpuops.sglang.common.http``, ``HEALTH`` by ``gpuops.sglang.common.health``, ``ROUTER`` by
``gpuops.sglang.common.router`` and ``SYSTEMD`` by ``gpuops.sglang.common.systemd``
(plugins/doc_fragments/common.py); the ranges of their numbers sit
beside them. tests/unit/plugins/module_utils/test_argument_specs.py fails when a spec and its fragment differ.
"""

from ansible_collections.gpuops.sglang.plugins.module_utils import option_ranges
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    DEFAULT_STATE_DIR,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.nvidia_smi import (
    DEFAULT_NVIDIA_SMI_TIMEOUT,
    DRIVER_GPUS_DIR,
)

STATE_DIR = {"state_dir": {"type": "path", "default": DEFAULT_STATE_DIR}}

GPU = {
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "nvidia_smi_timeout": {"type": "float", "default": DEFAULT_NVIDIA_SMI_TIMEOUT},
    "gpu_device_dir": {"type": "path", "default": "/dev"},
    "nvidia_driver_dir": {"type": "path", "default": DRIVER_GPUS_DIR},
}
GPU_RANGES = {"nvidia_smi_timeout": option_ranges.seconds(1, 600)}

HTTP = {
    "host": {"type": "str", "default": "127.0.0.1"},
    "api_key": {"type": "str", "no_log": True},
    "probe_timeout": {"type": "float", "default": 30},
}
HTTP_RANGES = {"probe_timeout": option_ranges.seconds(1, 600)}
# The modules that judge a server by its health endpoint.
HEALTH = {"health_path": {"type": "str", "default": "/health_generate"}}

# The SGLang router in front of the servers (module_utils/router.py): taken out before a stop, added back once ready.
ROUTER = {
    "router_url": {"type": "str"},
    "router_api_key": {"type": "str", "no_log": True},
    "router_timeout": {"type": "float", "default": 10},
    "router_worker_host": {"type": "str"},
}
ROUTER_RANGES = {"router_timeout": option_ranges.seconds(1, 600)}

# The units of launcher systemd (module_utils/launchers.py).
SYSTEMD_OPTIONS = {
    "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
    "systemctl": {"type": "str", "default": "systemctl"},
    "enabled": {"type": "bool", "default": False},
    "restart": {"type": "str", "choices": ["no", "on-failure"], "default": "no"},
    "restart_sec": {"type": "float", "default": 10},
    "start_limit_burst": {"type": "int", "default": 3},
    "start_limit_interval": {"type": "float", "default": 600},
}
SYSTEMD = {"systemd": {"type": "dict", "default": {}, "options": SYSTEMD_OPTIONS, "apply_defaults": True}}
SYSTEMD_RANGES = {"restart_sec": option_ranges.seconds(0.1, 3600), "start_limit_burst": option_ranges.count(1, 1000),
                  "start_limit_interval": option_ranges.seconds(0, 86400)}

# Modules that end a job on the host append what they found to the run journal (module_utils/journal.py).
JOURNAL = {"journal": {"type": "bool", "default": True}}

# The suboptions that say which server an entry of a module's ``servers`` list is (wait, probe, server,
# server_info; journal's ``servers`` is a list of names). Each module documents them itself - a doc fragment
# cannot carry them, as a module's own ``servers`` would replace the fragment's suboptions -
# and test_argument_specs.py fails when a module's documentation and its composed spec differ.
SERVER_IDENTITY = {
    "name": {"type": "str", "required": True},
    "port": {"type": "int"},
    "log_path": {"type": "path"},
}


def servers_option(identity=tuple(SERVER_IDENTITY), required=False, **own):
    """``{"servers": ...}``: a list of dicts with the SERVER_IDENTITY suboptions named in ``identity``, then the
    module's ``own`` suboptions."""
    options = {key: dict(SERVER_IDENTITY[key]) for key in identity}
    options.update(own)
    option = {"type": "list", "elements": "dict", "options": options}
    if required:
        option["required"] = True
    return {"servers": option}


# A launch script to write ({name, path, content}): gpuops.sglang.server's and launch_scripts' ``scripts``. The
# script holds the API key (shell-quoted, which the secrets masking would not match).
SCRIPT_OPTIONS = {
    "name": {"type": "str", "required": True},
    "path": {"type": "path", "required": True},
    "content": {"type": "str", "required": True, "no_log": True},
}


# Each module's own options and ranges, where more than its module reads them: the action plugins validate the
# options on the controller, and plugin_utils/role_options takes the ranges for the role variables passed to
# them - from here, without importing the module's host-side logic.
# gpuops.sglang.host_lock
LOCK_RANGES = {
    "lock_timeout": option_ranges.LOCK_TIMEOUT,
    "lease_timeout": option_ranges.seconds(60, 86400),
    "progress_interval": option_ranges.PROGRESS_INTERVAL,
}
# gpuops.sglang.host_lock's converge (module_utils/converge.py): what the role's server and wait calls would get
# beyond the options the three modules share (state_dir, gpu, http, health, router, progress_interval).
CONVERGE = {"converge": {"type": "dict", "options": {
    "servers": {"type": "list", "elements": "dict", "required": True},
    "candidates": {"type": "list", "elements": "dict", "required": True, "options": {
        "sglang": {"type": "list", "elements": "dict", "required": True},
        "scripts": {"type": "list", "elements": "dict", "required": True, "options": SCRIPT_OPTIONS},
    }},
    "required_paths": {"type": "list", "elements": "path", "default": []},
    "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
    "server": {"type": "dict", "default": {}},
    "timeout": {"type": "float", "default": 1800},
    "stall_timeout": {"type": "float", "default": 600},
    "kill_stalled": {"type": "bool", "default": False},
    "state": {"type": "str", "choices": ["started", "restarted"], "default": "started"},
    "act": {"type": "bool", "default": False},
    "hold_on_failure": {"type": "bool", "default": False},
}}}
# gpuops.sglang.server
SERVER_RANGES = dict(
    GPU_RANGES,
    **HTTP_RANGES,
    **ROUTER_RANGES,
    stop_timeout=option_ranges.seconds(0, 3600),
    drain_timeout=option_ranges.seconds(0, 86400),
    gpu_free_timeout=option_ranges.seconds(0, 3600),
    gpu_free_threshold_mib=option_ranges.count(0, 1 << 20),
    lock_timeout=option_ranges.LOCK_TIMEOUT,
    log_generations=option_ranges.count(1, 100),
    progress_interval=option_ranges.PROGRESS_INTERVAL,
    max_changes=option_ranges.count(1, 4096),
    batch_size=option_ranges.count(1, 4096),
)
# gpuops.sglang.wait
WAIT_ARGUMENT_SPEC = {
    **servers_option(required=True, pid={"type": "int"}, action={"type": "str"}, node_rank={"type": "int"}),
    **HTTP,
    **HEALTH,
    **ROUTER,
    "timeout": {"type": "float", "default": 1800},
    "stall_timeout": {"type": "float", "default": 600},
    "kill_stalled": {"type": "bool", "default": False},
    "progress_interval": {"type": "float", "default": 10},
    **STATE_DIR,
    "run_id": {"type": "str"},
    "release_run": {"type": "bool", "default": False},
    "hold_on_failure": {"type": "bool", "default": False},
    **JOURNAL,
}
WAIT_RANGES = dict(
    HTTP_RANGES,
    **ROUTER_RANGES,
    timeout=option_ranges.seconds(1, 7 * 86400),
    stall_timeout=option_ranges.seconds(1, 86400, off=0),
    progress_interval=option_ranges.PROGRESS_INTERVAL,
)
# gpuops.sglang.probe
PROBE_ROUTES = {"generate": "/generate", "completions": "/v1/completions"}
PROBE_ARGUMENT_SPEC = {
    **servers_option(("name", "port"), required=True),
    "concurrency": {"type": "int", "default": 16},
    "duration": {"type": "float", "default": 30},
    "input_len": {"type": "int", "default": 256},
    "output_len": {"type": "int", "default": 128},
    "route": {"type": "str", "choices": sorted(PROBE_ROUTES), "default": "generate"},
    "max_requests": {"type": "int", "default": 100000},
    "progress_interval": {"type": "float", "default": 10},
    "run_id": {"type": "str"},
    "release_run": {"type": "bool", "default": False},
    **HTTP,
    **STATE_DIR,
    **JOURNAL,
}
PROBE_RANGES = dict(
    HTTP_RANGES,
    concurrency=option_ranges.count(1, 1024),
    duration=option_ranges.seconds(1, 600),
    input_len=option_ranges.count(1, 1000000, unit=" tokens"),
    output_len=option_ranges.count(1, 1000000, unit=" tokens"),
    max_requests=option_ranges.count(1, 10000000),
    progress_interval=option_ranges.PROGRESS_INTERVAL,
)

# Fragment name (as modules extend it) -> the spec it documents.
BY_FRAGMENT = {"gpuops.sglang.common.state_dir": STATE_DIR, "gpuops.sglang.common.gpu": GPU,
               "gpuops.sglang.common.http": HTTP, "gpuops.sglang.common.health": HEALTH,
               "gpuops.sglang.common.router": ROUTER, "gpuops.sglang.common.systemd": SYSTEMD,
               "gpuops.sglang.common.journal": JOURNAL}
