"""What is measured: the contenders (ours and the baselines users write today) and the scenarios they run.

A scenario is a fleet before the run (launched by the contender itself, untimed) and the fleet the timed run
brings up. Faults come from the simulator (tests/simulator/sglang_sim.py, SGLANG_SIM_FAULT) and are set on one
server through its ``env`` in ``sglang_servers``, which ours renders into the launch script and the baselines
put in front of the command line.
"""

import dataclasses

# The seed workflow, in real seconds: `sleep 240 && curl .../health` after relaunching 8 servers, and the
# incident's `uri` loop of 40 x 15 s that noticed a crashed server after 10 minutes.
SEED_SLEEP_S = 240
SEED_DELAY_S = 15
SEED_RETRIES = 40
# The real startup those waits were sized for (the sleep leaves 20 % to spare). The baselines' waits are
# scaled by (slowest simulated startup, measured) / SEED_STARTUP_S, so they fit the simulated fleet as the
# seed's fitted the real one.
SEED_STARTUP_S = 200


@dataclasses.dataclass(frozen=True)
class Contender:
    key: str
    label: str
    playbook: str
    # The task whose end is the moment the playbook knows whether the servers are ready.
    knows_task: str


CONTENDERS = (
    Contender("ours", "gpuops.sglang playbooks/relaunch.yml", "playbooks/relaunch.yml",
              "Wait until the launched servers are ready"),
    Contender("seed_sleep", "(a) pkill -f, relaunch, fixed sleep, one health check per port",
              "bench/baselines/seed_sleep.yml", "Sleep, then one health check per port"),
    Contender("uri_until", "(b) pkill -f, relaunch, uri per port with until/retries/delay",
              "bench/baselines/uri_until.yml", "Wait for health on each port (until/retries/delay)"),
    Contender("by_hand_loop", "(c) the by-hand loop: one task per server and step",
              "bench/baselines/by_hand_loop.yml", "Wait for health (the incident's until loop)"),
)
CONTENDER_KEYS = tuple(contender.key for contender in CONTENDERS)

CRASH_FAULT = "draft_crash"       # SGLang crashing while it starts the speculative-decoding draft worker
ZOMBIE_FAULT = "orphan_scheduler"  # a scheduler outside its server's session: a kill of the server leaves it


@dataclasses.dataclass(frozen=True)
class Fleet:
    """The servers of one host: ``servers`` per-GPU servers, or one server over all GPUs; at most one fault."""

    layout: str  # "per_gpu" | "tp"
    fault: str = None

    def servers(self, count, base_port, draft_model_path):
        if self.layout == "tp":
            entries = [{"name": f"tp{count}", "port": base_port, "gpus": list(range(count)), "tp_size": count}]
        else:
            entries = [{"name": f"gpu{index}", "port": base_port + index, "gpus": [index]} for index in range(count)]
        if self.fault:
            faulty = entries[fault_index(len(entries))]
            faulty["env"] = {"SGLANG_SIM_FAULT": self.fault}
            if self.fault == CRASH_FAULT:
                faulty["speculative"] = {"algorithm": "EAGLE3", "draft_model_path": draft_model_path}
        return entries


def fault_index(count):
    """The faulty server: gpu3 of eight."""
    return min(3, count - 1)


PER_GPU = Fleet("per_gpu")
TP = Fleet("tp")


@dataclasses.dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    previous: Fleet  # what runs before the timed run
    fleet: Fleet     # what the timed run brings up
    ours_state: str = "restarted"
    # The faulty server of the previous fleet is SIGKILLed before the run: what its fault leaves behind remains.
    kill_faulty_first: bool = False

    def leaves(self, succeeded):
        """The fleet a run leaves behind when it succeeded; None when it cannot be reused."""
        return self.fleet if succeeded and not self.fleet.fault else None


SCENARIOS = (
    Scenario("healthy", "per-GPU servers (one per GPU), all healthy", PER_GPU, PER_GPU),
    Scenario("noop", "a no-op converge (nothing changed since the last run)", PER_GPU, PER_GPU, ours_state="started"),
    Scenario("crash", f"one server (gpu3) crashes during init: {CRASH_FAULT}, starting the EAGLE3 draft worker",
             PER_GPU, Fleet("per_gpu", CRASH_FAULT)),
    Scenario("zombie", f"one zombie: gpu3's server was SIGKILLed and its scheduler, outside the server's session "
             f"({ZOMBIE_FAULT}), still holds GPU 3", Fleet("per_gpu", ZOMBIE_FAULT), PER_GPU, kill_faulty_first=True),
    Scenario("tp8", "one server over all GPUs (TP=8 on eight)", TP, TP),
)
SCENARIO_KEYS = tuple(scenario.key for scenario in SCENARIOS)


def scenario(key):
    return next(item for item in SCENARIOS if item.key == key)


def baseline_waits(startup_s):
    """The seed's waits scaled to a simulated fleet whose slowest server starts in ``startup_s``."""
    scale = startup_s / SEED_STARTUP_S
    return {"scale": round(scale, 5), "bench_sleep_s": round(SEED_SLEEP_S * scale, 2),
            "bench_delay_s": round(SEED_DELAY_S * scale, 3), "bench_retries": SEED_RETRIES}
