# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: journal
short_description: Read the run journal of a GPU host - what each relaunch, probe, stop and status run found
description:
  - Reads C(<state_dir>/journal.jsonl), which M(gpuops.sglang.wait), M(gpuops.sglang.server),
    M(gpuops.sglang.probe) and M(gpuops.sglang.server_info) append to (see their O(gpuops.sglang.wait#module:journal)
    option), and returns
    the last runs, the lines of one run merged per server.
  - C(playbooks/history.yml) prints them as a table.
version_added: 0.2.0
author: gpuops.sglang contributors (@gpuops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuops.sglang.common.state_dir
  - gpuops.sglang.common.idempotent
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: N/A
    details: The module only reads.
  idempotent:
    support: full
    details: The module only reads.
options:
  last:
    description: How many runs to return, the newest ones (1-1000).
    type: int
    default: 10
  jobs:
    description: Only runs of these jobs.
    type: list
    elements: str
    choices: [relaunch, stop, status]
    default: [relaunch, stop, status]
  servers:
    description: Only these servers (in each run, the others are left out; runs without any of them are skipped).
    type: list
    elements: str
seealso:
  - module: gpuops.sglang.wait
  - module: gpuops.sglang.probe
"""

EXAMPLES = r"""
- name: The last five relaunches of this host
  gpuops.sglang.journal:
    last: 5
    jobs: [relaunch]
  register: history

- name: What gpu3 configured in each of them
  ansible.builtin.debug:
    msg: "{{ history.runs | map(attribute='servers') | map(attribute='gpu3') | map(attribute='facts') }}"
"""

RETURN = r"""
runs:
  description:
    - The runs, oldest first - C(run_id), C(time) (epoch), C(job), C(by) (C(controller), C(user), C(awx_job_id)),
      C(servers) (name -> entry, as M(gpuops.sglang.wait) returns it in RV(gpuops.sglang.wait#module:servers[].journal),
      with C(probe), C(metrics) and C(capacity) where a probe or a status run added them).
  returned: always
  type: list
  elements: dict
records:
  description: Lines read from the journal (all runs, before filtering).
  returned: always
  type: int
path:
  description: The journal file.
  returned: always
  type: str
"""

# First of ours: the rest of module_utils is then compiled once per host, not in every call.
import ansible_collections.gpuops.sglang.plugins.module_utils._bytecode_cache  # noqa: F401  pylint: disable=unused-import
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.sglang.plugins.module_utils import (
    argument_specs,
    journal,
    naming,
    option_ranges,
)

ARGUMENT_SPEC = {
    "last": {"type": "int", "default": 10},
    "jobs": {"type": "list", "elements": "str", "choices": ["relaunch", "stop", "status"],
             "default": ["relaunch", "stop", "status"]},
    "servers": {"type": "list", "elements": "str"},
    **argument_specs.STATE_DIR,
}
RANGES = {"last": option_ranges.count(1, 1000)}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    problems = option_ranges.range_problems(params, RANGES)
    if problems:
        module.fail_json(msg="invalid request: " + "; ".join(problems))
    records = journal.read_records(params["state_dir"])
    module.exit_json(changed=False, records=len(records), path=naming.journal_file(params["state_dir"]),
                     runs=journal.select_runs(journal.runs(records), params["jobs"], params["servers"], params["last"]))


if __name__ == "__main__":
    main()
