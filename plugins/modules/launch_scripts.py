# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: launch_scripts
short_description: Write a GPU host's SGLang launch scripts in one call
description:
  - Writes a set of launch scripts rendered on the controller (role C(gpuops.sglang.launch_scripts))
    atomically, and reports which of them changed.
  - One module call for all servers of a host, because every call through
    C(community.proxmox.proxmox_pct_remote) costs several C(pct exec) round trips.
  - Before writing anything it checks that O(required_paths) (model directories) exist, so a typo in a
    model path fails without touching the host.
version_added: 0.1.0
author: gpuops.sglang contributors (@gpuops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuops.sglang.common.idempotent
  - gpuops.sglang.common.state_dir
options:
  run_id:
    description:
      - The run that holds the host (M(gpuops.sglang.host_lock)) and writes these scripts. Nothing is written when
        it no longer holds the host (its hold expired and another run took it), so a deploy never rewrites a script
        a relaunch of the same host is about to launch. Without it the hold is not looked at.
    type: str
  release_run:
    description:
      - Give the host back once the scripts are written, since the write is the last call of the run that holds
        it (O(run_id)). A write that fails keeps the hold, for the run to release.
    type: bool
    default: false
  scripts:
    description: The scripts to write.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Server name, used as key of the results.
        type: str
        required: true
      path:
        description: Absolute path of the script. Missing parent directories are created.
        type: path
        required: true
      content:
        description: Full content of the script.
        type: str
        required: true
  mode:
    description:
      - Permissions of every script. The default keeps API keys readable by the owner only.
      - With O(secrets), or scripts that hold credentials (credential-like exports such as C(HF_TOKEN), flags such
        as C(--hf-token)), a mode with group or other bits is refused.
    type: raw
    default: "0700"
  directory_mode:
    description: Permissions of parent directories the module creates.
    type: raw
    default: "0755"
  required_paths:
    description: Paths that must exist on the host before any script is written (model directories).
    type: list
    elements: path
    default: []
  secrets:
    description:
      - Values hidden from every output of the module (diff, invocation), e.g. the API key.
      - Values of C(--api-key), C(--admin-api-key) and other credential-like flags and exports are always hidden
        in diffs, also the previous ones, and those in O(scripts) from every output.
    type: list
    elements: str
    default: []
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Write all launch scripts of the host
  gpuops.sglang.launch_scripts:
    scripts:
      - name: gpu0
        path: /opt/gpuops-sglang/bin/gpu0.sh
        content: "{{ [sglang_server] | gpuops.sglang.launch_scripts(launch_scripts_settings) | map(attribute='content') | first }}"
    required_paths:
      - /models/Qwen3-Next-80B-A3B-Instruct
    secrets:
      - "{{ sglang_api_key }}"
"""

RETURN = r"""
released:
  description: Whether this call gave the host back (O(release_run)).
  returned: always
  type: bool
changed_scripts:
  description: Names of the scripts whose content or mode changed (or would change in check mode).
  returned: always
  type: list
  elements: str
  sample: [gpu0, gpu3]
scripts:
  description: Per script name, its path, whether it changed and the SHA-256 of its content.
  returned: always
  type: dict
  sample: {gpu0: {path: /opt/gpuops-sglang/bin/gpu0.sh, changed: true, sha256: 3a7bd3e2...}}
"""

# First of ours: the rest of module_utils is then compiled once per host, not in every call.
import ansible_collections.gpuops.sglang.plugins.module_utils._bytecode_cache  # noqa: F401  pylint: disable=unused-import
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.sglang.plugins.module_utils import (
    argument_specs,
    run_lock,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.script_files import (
    ScriptError,
    secrets_of,
    sync_scripts,
)


def _octal(module, name):
    value = module.params[name]
    try:
        return int(value, 8) if isinstance(value, str) else int(value)
    except ValueError:
        module.fail_json(msg=f"{name} {value!r} is not an octal mode like 0700")


def main():
    module = AnsibleModule(
        argument_spec={
            "scripts": {"type": "list", "elements": "dict", "required": True, "options": argument_specs.SCRIPT_OPTIONS},
            "mode": {"type": "raw", "default": "0700"},
            "directory_mode": {"type": "raw", "default": "0755"},
            "required_paths": {"type": "list", "elements": "path", "default": []},
            "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "run_id": {"type": "str"},
            "release_run": {"type": "bool", "default": False},
            **argument_specs.STATE_DIR,
        },
        supports_check_mode=True,
    )
    mode, directory_mode = _octal(module, "mode"), _octal(module, "directory_mode")
    scripts = module.params["scripts"]
    secrets = secrets_of(scripts, module.params["secrets"])
    # Ansible hides them from the whole result too, like the values of no_log options.
    module.no_log_values.update(secrets)
    if secrets and mode & 0o077:
        module.fail_json(msg=f"mode {mode:04o} lets the group or others read scripts that carry secrets (the API "
                             "key, credentials in the environment or flags): use 0700, or another mode without "
                             "group and other bits")
    run_id = None if module.check_mode else module.params["run_id"]
    try:
        if run_id:
            run_lock.renew(module.params["state_dir"], run_id)
        results, diffs = sync_scripts(scripts, mode, directory_mode, module.params["required_paths"],
                                      secrets, module.check_mode)
    except run_lock.RunLockError as error:
        module.fail_json(msg=str(error))
    except ScriptError as error:
        module.fail_json(msg=str(error), **error.details)
    released = bool(run_id and module.params["release_run"] and run_lock.release(module.params["state_dir"], run_id))
    changed_scripts = [script["name"] for script in scripts if results[script["name"]]["changed"]]
    module.exit_json(changed=bool(changed_scripts), changed_scripts=changed_scripts, scripts=results,
                     released=released, diff=diffs if module._diff else [])


if __name__ == "__main__":
    main()
