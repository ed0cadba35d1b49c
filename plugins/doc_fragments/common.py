# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation shared by the gpuops.sglang modules that look at a GPU host.

C(gpuops.sglang.common.state_dir), C(gpuops.sglang.common.gpu), C(gpuops.sglang.common.http),
C(gpuops.sglang.common.health), C(gpuops.sglang.common.router), C(gpuops.sglang.common.systemd) and
C(gpuops.sglang.common.journal) document the argument specs STATE_DIR, GPU, HTTP, HEALTH, ROUTER, SYSTEMD and
JOURNAL of
module_utils/argument_specs.py (a unit test keeps each fragment and its spec equal).
C(gpuops.sglang.common.idempotent) describes the C(idempotent) attribute, which
C(ansible.builtin.action_common_attributes) does not.
"""


class ModuleDocFragment:
    HTTP = r"""
options:
  host:
    description: Address the servers listen on, as seen from the GPU host.
    type: str
    default: 127.0.0.1
  api_key:
    description: Sent as C(Authorization Bearer) when the servers were started with C(--api-key).
    type: str
  probe_timeout:
    description:
      - Seconds one HTTP request may take (1-600). Must exceed SGLang's own 20 s health check timeout
        (C(SGLANG_HEALTH_CHECK_TIMEOUT)), or a busy but healthy server looks unreachable.
    type: float
    default: 30
"""

    HEALTH = r"""
options:
  health_path:
    description:
      - Health endpoint. C(/health_generate) runs a one-token generation, so a 200 means the server really serves.
      - Connection refused and HTTP 503 mean "still starting"; only HTTP 200 means ready.
    type: str
    default: /health_generate
"""

    ROUTER = r"""
options:
  router_url:
    description:
      - Base URL of the SGLang router (C(sglang-router), its worker API as of 0.3.2) in front of these servers, e.g.
        C(http://10.0.0.2:8000). Unset, no router is involved.
      - A server is taken out of the router before it is stopped, and added back once it is ready; a router that
        is unreachable, refuses the key or is not a router fails the call before any server is touched.
    type: str
  router_api_key:
    description:
      - Key of the router's worker API (its C(--api-key), or an admin key of its C(--control-plane-api-keys)).
        Never shown in results or errors.
    type: str
  router_timeout:
    description:
      - Seconds one call to the router may take (1-600); adding a ready server back waits up to this long for
        the router to list it healthy.
    type: float
    default: 10
  router_worker_host:
    description:
      - Address at which the router reaches these servers (a server is the router's worker
        C(http://<router_worker_host>:<port>)). Defaults to O(host).
    type: str
"""

    STATE_DIR = r"""
options:
  state_dir:
    description:
      - Directory of the per-server state files C(<state_dir>/<name>.json) written by M(gpuops.sglang.server),
        and of the per-host lock C(<state_dir>/.lock). M(gpuops.sglang.server) creates it when missing.
    type: path
    default: /var/lib/gpuops-sglang
"""

    JOURNAL = r"""
options:
  journal:
    description:
      - Append what this call found to the host's run journal C(<state_dir>/journal.jsonl) (one JSON line per
        call; settings read from the launch scripts with keys hidden, configured facts, startup timings,
        outcomes, probe figures, metrics; never a secret). M(gpuops.sglang.journal) reads it back.
      - The journal is bounded (about 1 MiB); the oldest lines go first, except each server's last good relaunch.
      - A journal that cannot be written never fails the call; RV(journal_error) says why.
    type: bool
    default: true
"""

    GPU = r"""
options:
  nvidia_smi:
    description:
      - The C(nvidia-smi) executable, a name looked up in E(PATH) or an absolute path.
      - Only C(--query-gpu) is used (memory per GPU); NVML cannot list processes inside containers, so
        processes are found through C(/proc) instead.
    type: str
    default: nvidia-smi
  nvidia_smi_timeout:
    description:
      - Seconds one C(nvidia-smi) call may take (1-600). A hung driver makes it hang; the task then fails naming
        the command, and nothing is killed after a failed GPU query.
    type: float
    default: 30
  gpu_device_dir:
    description:
      - Directory of the GPU device nodes C(nvidia<M>). A process holds a GPU when one of its file descriptors
        points to the GPU's node C(<gpu_device_dir>/nvidia<M>), M being the GPU's device minor.
    type: path
    default: /dev
  nvidia_driver_dir:
    description:
      - The driver's per-GPU information (C(Device Minor) by PCI bus id). In a container given some of the host's
        GPUs, nvidia-smi numbers them from 0 while their device nodes keep the host's minors; this maps one to
        the other. Where it cannot be read, GPU N is taken to be C(nvidia<N>).
    type: path
    default: /proc/driver/nvidia/gpus
"""

    SYSTEMD = r"""
options:
  systemd:
    description:
      - The units of servers run by systemd (M(gpuops.sglang.server) with O(gpuops.sglang.server#module:launcher=systemd)).
        A change of any of them relaunches the server; M(gpuops.sglang.server_info) uses O(systemd.systemctl) only.
    type: dict
    default: {}
    suboptions:
      unit_dir:
        description: Directory of the unit files C(gpuops-sglang-<deployment id>-<name>.service).
        type: path
        default: /etc/systemd/system
      systemctl:
        description: The C(systemctl) command.
        type: str
        default: systemctl
      enabled:
        description:
          - Enable the units, so the servers start again when the host (container) boots.
          - M(gpuops.sglang.server) with O(gpuops.sglang.server#module:state=stopped) disables them.
        type: bool
        default: false
      restart:
        description: C(Restart=) of the units - V(on-failure) lets systemd restart a server that crashed.
        type: str
        choices: ["no", on-failure]
        default: "no"
      restart_sec:
        description: Seconds systemd waits before such a restart (0.1-3600).
        type: float
        default: 10
      start_limit_burst:
        description: At most this many starts within O(systemd.start_limit_interval) (1-1000), so a crash loop ends.
        type: int
        default: 3
      start_limit_interval:
        description: Seconds of the start limit window (0-86400).
        type: float
        default: 600
"""

    IDEMPOTENT = r"""
attributes:
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second run reports no change.
"""
