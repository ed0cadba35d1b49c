"""The bench's hands on a simulated GPU host (stdlib only: runs on this machine or in a rig container).

Every process of a bench fleet - the servers, their schedulers, orphans included, whoever launched them -
carries ``GPUOPS_FAKE_GPU_DIR=<that host's fake GPU dir>`` in its environment (the launch scripts and the
baselines' command lines export it) or holds one of that dir's fake devices open. That is how this tool finds
them; nothing else is touched.

  fleet_tool.py <gpu_dir> reset              SIGKILL every process of the fleet, by pid, until none is left
  fleet_tool.py <gpu_dir> kill-server PORT   SIGKILL the main process of the server on PORT (a server killed
                                             hard: what its children do then is theirs)
  fleet_tool.py <gpu_dir> orphans            the pids of schedulers outside their server's session (they
                                             outlive their server and keep holding its GPU memory: a zombie)

In a container it is run as ``lxc-attach -n <vmid> -- python3 - <gpu_dir> <command>`` with this file on stdin.
"""

import json
import os
import signal
import sys
import time

RESET_TIMEOUT_S = 15


def fleet_pids(gpu_dir):
    """Processes with the fleet's GPU dir in their environment, or holding one of its fake devices open (a
    scheduler whose title setproctitle wrote over its environment, as it does without SPT_NOENV)."""
    needle = f"GPUOPS_FAKE_GPU_DIR={gpu_dir}".encode()
    devices = os.path.join(gpu_dir, "dev") + os.sep
    return [int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and int(entry) != os.getpid() and (has_environ(entry, needle) or holds(entry, devices))]


def has_environ(pid, needle):
    return needle in proc_strings(pid, "environ")


def holds(pid, prefix):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    return any(link_of(f"/proc/{pid}/fd/{fd}").startswith(prefix) for fd in fds)


def link_of(path):
    try:
        return os.readlink(path)
    except OSError:
        return ""


def proc_strings(pid, name):
    """/proc/<pid>/<name> (environ, cmdline) as its NUL-separated strings; [] when it is gone."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def argv_of(pid):
    return proc_strings(pid, "cmdline")


def is_orphaned_scheduler(pid):
    """A scheduler that left its server's session (sglang #23627): it outlives a kill of the server."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            session = int(handle.read().rsplit(")", 1)[1].split()[3])
    except OSError:
        return False
    return argv_of(pid)[0].startswith(b"sglang::scheduler") and session == pid


def flag_in(argv, flag):
    return any(argv[index:index + len(flag)] == flag for index in range(len(argv)))


def kill_server(gpu_dir, port):
    """SIGKILL the server main process(es) listening on ``port`` by their command line; return their pids."""
    flag = [b"--port", str(port).encode()]
    mains = [pid for pid in fleet_pids(gpu_dir) if flag_in(argv_of(pid), flag)]
    for pid in mains:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + RESET_TIMEOUT_S
    while set(mains) & set(fleet_pids(gpu_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # its children that die with it (PR_SET_PDEATHSIG) are gone by now
    return mains


def reset(gpu_dir):
    deadline = time.monotonic() + RESET_TIMEOUT_S
    killed = set()
    while True:
        pids = fleet_pids(gpu_dir)
        if not pids:
            return sorted(killed)
        if time.monotonic() > deadline:
            raise SystemExit(f"fleet of {gpu_dir}: pids {pids} survive SIGKILL after {RESET_TIMEOUT_S} s")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.1)


def main(argv):
    if len(argv) < 2 or (argv[1], len(argv)) not in (("reset", 2), ("orphans", 2), ("kill-server", 3)):
        raise SystemExit(__doc__)
    gpu_dir, command = argv[:2]
    if command == "reset":
        print(json.dumps({"killed": reset(gpu_dir)}))
    elif command == "kill-server":
        print(json.dumps({"killed": kill_server(gpu_dir, int(argv[2]))}))
    else:
        print(json.dumps({"orphans": [pid for pid in fleet_pids(gpu_dir) if is_orphaned_scheduler(pid)]}))


if __name__ == "__main__":
    main(sys.argv[1:])
