"""Run-wide settings taken from the environment (class Sim), made once in main() and handed to the objects
that read them.

Environment:
  GPUOPS_FAKE_GPU_DIR     fake GPU state dir (fakegpu.py init); without it no memory is accounted
  SGLANG_SIM_VERSION      the SGLang version simulated: 0.5.9, 0.5.10 or 0.5.23; a post release (0.5.10.post1)
                          is its release's behaviour, reported as given. It picks the flag table (flags.py), the
                          log dialect (0.5.9 and 0.5.10 "classic", 0.5.23 "new"), /ready, the shutdown after the
                          drain and the metric names. Unset, the simulator runs the version of the sglang
                          distribution its interpreter sees - the dist-info a simulated host has installed
                          (``--make-site``, dist_info.py), which is also what the collection reads as the host's
                          SGLang - and without one the newest, 0.5.23 (DEFAULT_VERSION). Set beside a dist-info of
                          another version, the server refuses to start: the host would say one version and run
                          another.
  SGLANG_SIM_TIME_SCALE   multiplies every startup phase duration (default 1: ready in about 3-5 s; 0: at once)
                          and v0.5.23's shutdown waits (15 s, 60 s; whole at 0); the serving rates below are not
                          scaled
  SGLANG_SIM_DECODE_TOKENS_PER_S   tokens per second each running request generates (default 40)
  SGLANG_SIM_PREFILL_TOKENS_PER_S  prompt tokens per second a rank prefills (default 20000)
  SGLANG_SIM_TICK_S       shortest gap between two chunks of a stream, and the scheduler's tick (decode log
                          lines, idle refresh) (default 0.1: 64 streams took 7 % of a core here, 12 % at 0.05)
  SGLANG_SIM_IDLE_REFRESH_S  seconds without a batch before the idle gauge refresh (default 30, as SGLang)
  SGLANG_SIM_FAULT        comma list of faults (faults.py: one row each); ``<fault>@<R>`` applies only on node
                          rank R (one environment for every node)
  SGLANG_SIM_FAULT_DELAY  seconds after ready before crash_after_ready fires (default 2)
  SGLANG_SIM_RELEASE_DELAY seconds GPU memory outlives the process with slow_release (default 3)
  SGLANG_SIM_WEIGHTS_GATE a path: the target weights stay at 0 % loaded until it exists (a
                          checkpoint on a slow mount), so a test gets a startup as long as it needs, however busy the
                          machine is, and ends it by creating the file
"""

import os
import re
import sys
import time

from .faults import parse_faults

DEFAULT_VERSION = "0.5.23"
# Each supported release and its log dialect.
DIALECTS = {"0.5.9": "classic", "0.5.10": "classic", "0.5.23": "new"}


def release_of(version):
    """The supported release a version string is (``0.5.10.post1`` -> ``0.5.10``), or None."""
    match = re.fullmatch(r"(\d+\.\d+\.\d+)(\.post\d+)?", version or "")
    return match.group(1) if match and match.group(1) in DIALECTS else None


def installed_version():
    """(version, location) of the sglang distribution this interpreter sees (importlib.metadata, as the collection
    reads a host's SGLang), or (None, None)."""
    from importlib import metadata
    try:
        dist = metadata.distribution("sglang")
    except metadata.PackageNotFoundError:
        return None, None
    return dist.version, str(dist.locate_file(""))


def simulated_version():
    """The version this server simulates: SGLANG_SIM_VERSION, else the installed sglang's, else DEFAULT_VERSION;
    exits with the reason where it is not one the simulator has, or where the two disagree."""
    configured = os.environ.get("SGLANG_SIM_VERSION") or None
    installed, location = installed_version()
    if configured and installed and configured != installed:
        sys.exit(f"SGLANG_SIM_VERSION is {configured}, but sglang {installed} is installed for this interpreter "
                 f"({location}): a host runs the SGLang it has installed; unset SGLANG_SIM_VERSION, or put a "
                 f"dist-info of {configured} first on its PYTHONPATH (sglang_sim.py --make-site DIR --version "
                 f"{configured})")
    if configured and release_of(configured) is None:
        sys.exit(f"SGLANG_SIM_VERSION must be one of {', '.join(DIALECTS)} (or a post release of one), "
                 f"not {configured!r}")
    if installed and release_of(installed) is None:
        sys.exit(f"sglang {installed} is installed for this interpreter ({location}); the simulator simulates "
                 f"{', '.join(DIALECTS)} (or a post release of one)")
    return configured or installed or DEFAULT_VERSION


def getenv_float(name, default):
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def getenv_positive(name, default):
    value = getenv_float(name, default)
    if value <= 0:
        sys.exit(f"{name} must be a number above 0, not {os.environ[name]!r}; unset it for {default:g}")
    return value


class Sim:
    """Run-wide settings taken from the environment."""

    def __init__(self):
        self.version = simulated_version()
        self.release = release_of(self.version)
        self.log_format = DIALECTS[self.release]
        self.time_scale = getenv_float("SGLANG_SIM_TIME_SCALE", 1.0)
        self.node_faults = parse_faults(os.environ.get("SGLANG_SIM_FAULT", ""))
        self.fault_delay = getenv_float("SGLANG_SIM_FAULT_DELAY", 2.0)
        self.select_node(0)
        self.gpu_dir = os.environ.get("GPUOPS_FAKE_GPU_DIR") or None
        self.new = self.log_format == "new"
        self.decode_rate = getenv_positive("SGLANG_SIM_DECODE_TOKENS_PER_S", 40.0)
        self.prefill_rate = getenv_positive("SGLANG_SIM_PREFILL_TOKENS_PER_S", 20000.0)
        self.tick = getenv_positive("SGLANG_SIM_TICK_S", 0.1)
        self.idle_refresh = getenv_positive("SGLANG_SIM_IDLE_REFRESH_S", 30.0)
        self.weights_gate = os.environ.get("SGLANG_SIM_WEIGHTS_GATE") or None

    def at_least(self, release):
        """Whether the simulated release is this one or a later one."""
        return tuple(map(int, self.release.split("."))) >= tuple(map(int, release.split(".")))

    def select_node(self, node_rank):
        """Keep the faults meant for this node (``fault@<node rank>``, or unqualified)."""
        self.faults = {name for name, node in self.node_faults if node in (None, node_rank)}
        self.release_delay = getenv_float("SGLANG_SIM_RELEASE_DELAY", 3.0) if "slow_release" in self.faults else None

    def sleep(self, seconds):
        if self.time_scale > 0:
            time.sleep(seconds * self.time_scale)

    def pass_weights_gate(self):
        """Return once SGLANG_SIM_WEIGHTS_GATE exists (at once without one)."""
        while self.weights_gate and not os.path.exists(self.weights_gate):
            time.sleep(0.1)

    def scaled(self, seconds):
        """A timeout on the simulated clock (startup, v0.5.23's shutdown): scaled like the phases, whole at time
        scale 0."""
        return seconds * self.time_scale if self.time_scale > 0 else seconds
