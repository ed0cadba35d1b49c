# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: probe
short_description: Measure the throughput of SGLang servers with real requests at a constant concurrency
description:
  - For O(duration) seconds, keeps O(concurrency) streaming requests in flight against every listed server
    (from the GPU host itself), each asking for exactly O(output_len) tokens (C(ignore_eos)) after a prompt of
    O(input_len) token ids, on SGLang's C(/generate) or the OpenAI C(/v1/completions) route.
  - Reports per server and for the host the output tokens per second (tokens whose stream chunk arrived inside
    the window), requests per second, time to first token and end-to-end latency (p50, p90) and the errors (a
    non-200 answer, a stream that ends without C([DONE]), a connection failure). Requests still in flight when
    the window closes are cut and counted in RV(servers[].cut_at_end), not as errors.
  - Reads C(/metrics) half-way and near the end of the window, and names the binding constraint of each server from
    the busier sample (RV(servers[].capacity); rules in C(docs/capacity.md)).
  - Only servers this deployment launched are probed - recorded in O(state_dir) by M(gpuops.sglang.server), their
    main process alive and carrying the ownership marker; any other server is refused by name
    (RV(refused)), and the task fails when none is left.
  - Bounded in time (O(duration), O(probe_timeout) per read) and in count (O(max_requests)). The load runs in a
    detached worker on the host; the action plugin prints a progress line about every O(progress_interval) seconds.
  - The figures are appended to the run journal (O(journal)) with the run's O(run_id), and compared with the last
    earlier run in which the server came up with the same model (RV(servers[].since_last_good)).
version_added: 0.2.0
author: gpuops.sglang contributors (@gpuops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuops.sglang.common.state_dir
  - gpuops.sglang.common.http
  - gpuops.sglang.common.journal
  - ansible.builtin.action_common_attributes.flow
attributes:
  check_mode:
    support: full
    details: In check mode nothing is sent; RV(servers) says which servers would be probed (V(would_probe)) or refused.
  diff_mode:
    support: none
  action:
    support: full
    details: The action plugin runs the module in slices and prints the progress lines.
  async:
    support: none
  bypass_host_loop:
    support: none
  platform:
    platforms: posix
options:
  servers:
    description: The servers to probe; O(servers[].port) defaults to the one recorded in the state file.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - Server name - the value of its ownership marker C(GPUOPS_SGLANG_SERVER) and the name of its state file
            C(<state_dir>/<name>.json); letters, digits, C(.), C(_) and C(-), starting with a letter or digit.
        type: str
        required: true
      port:
        description: HTTP port; must be the recorded one.
        type: int
  concurrency:
    description: Requests in flight per server at all times (1-1024).
    type: int
    default: 16
  duration:
    description: Seconds of load, the measuring window (1-600).
    type: float
    default: 30
  input_len:
    description: Prompt length in tokens (token ids are sent, so the length is exact) (1-1000000).
    type: int
    default: 256
  output_len:
    description: Output tokens per request (C(max_new_tokens) / C(max_tokens) with C(ignore_eos)) (1-1000000).
    type: int
    default: 128
  route:
    description: V(generate) (SGLang's C(/generate), streamed) or V(completions) (C(/v1/completions), streamed with usage).
    type: str
    choices: [completions, generate]
    default: generate
  max_requests:
    description: Requests the whole probe may send, over all servers (1-10000000); the load ends early when spent.
    type: int
    default: 100000
  progress_interval:
    description: Seconds between progress lines (0.1-600).
    type: float
    default: 10
  run_id:
    description: The run (from M(gpuops.sglang.host_lock)) the probe belongs to; its lease is renewed by every slice.
    type: str
  release_run:
    description: When the probe is over, give the host back for O(run_id) (the last call of a run).
    type: bool
    default: false
  _carry:
    description: Internal, set by the action plugin - the probe's job. Do not set it.
    type: dict
notes:
  - The probe is load on production servers; run it where that is acceptable (after a relaunch, before traffic).
seealso:
  - module: gpuops.sglang.wait
  - module: gpuops.sglang.journal
"""

EXAMPLES = r"""
- name: 30 s at 64 requests in flight per server, 1024 tokens in, 256 out
  gpuops.sglang.probe:
    servers: "{{ range(8) | map('string') | map('regex_replace', '^', 'gpu') | map('community.general.dict_kv', 'name') }}"
    concurrency: 64
    duration: 30
    input_len: 1024
    output_len: 256
  register: probed

- name: Host throughput
  ansible.builtin.debug:
    msg: "{{ probed.host.output_tok_s }} output tok/s, p90 TTFT {{ probed.host.ttft_p90_s }} s"
"""

RETURN = r"""
msg:
  description: One sentence, e.g. C(8 servers probed for 30 s at concurrency 64 - 10240.5 output tok/s, 0 errors).
  returned: always
  type: str
servers:
  description: One entry per server.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Server name.
      type: str
    status:
      description: V(probed), V(refused) (not ours, not running) or, in check mode, V(would_probe).
      type: str
    error:
      description: Why a refused server was not probed.
      type: str
    output_tok_s:
      description: Output tokens per second inside the window.
      type: float
    requests_s:
      description: Requests completed per second inside the window.
      type: float
    ttft_p50_s:
      description: Median time to first token of the completed requests (p90 in C(ttft_p90_s)).
      type: float
    e2e_p50_s:
      description: Median end-to-end latency of the completed requests (p90 in C(e2e_p90_s)).
      type: float
    requests:
      description: Requests completed inside the window.
      type: int
    errors:
      description: Failed requests; C(error_examples) holds up to three distinct messages.
      type: int
    cut_at_end:
      description: Requests still in flight when the window closed (cut, not errors).
      type: int
    capacity:
      description: The binding constraint from C(/metrics) under the load - C(bound), C(evidence), C(advice), C(figures).
      type: dict
    since_last_good:
      description:
        - The figures against the last good run's probe, when it had one - C(probe) maps each figure to its
          C(before) and C(after).
      type: dict
host:
  description: The same figures for the whole host (all servers' requests together).
  returned: when probed
  type: dict
refused:
  description: The servers that were not probed, with why.
  returned: when probed
  type: list
  elements: dict
released:
  description: With O(release_run), whether the run still held the host and gave it back.
  returned: when O(release_run) and O(run_id) were given, outside check mode
  type: bool
journal_error:
  description: Why the run journal could not be written; null when it was.
  returned: when O(journal), outside check mode
  type: str
"""

# First of ours: the rest of module_utils is then compiled once per host, not in every call.
import ansible_collections.gpuops.sglang.plugins.module_utils._bytecode_cache  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpuops.sglang.plugins.module_utils.argument_specs import (
    PROBE_ARGUMENT_SPEC,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.host_job import JobError
from ansible_collections.gpuops.sglang.plugins.module_utils.load_probe import (
    ProbeError,
    probe_slice,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sliced_module import (
    run_slice,
)


def main():
    run_slice(PROBE_ARGUMENT_SPEC, probe_slice, (ProbeError, JobError))


if __name__ == "__main__":
    main()
