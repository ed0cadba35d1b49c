"""Return a rig container to a clean GPU host: no servers, no leftovers of an earlier scenario.

Kills every process carrying the ownership marker (servers, orphaned schedulers) or the test
harness' foreign-process tag, waits until they are gone, then removes the collection's state,
scripts and logs. Prints what it killed; exit 0 whatever was (not) found.
"""

import glob
import os
import shutil
import signal
import subprocess
import sys
import time

TAGS = (b"GPUOPS_SGLANG_SERVER=", b"GPUOPS_MOLECULE_FOREIGN=")
PATHS = ("/var/lib/gpuops-sglang", "/opt/gpuops-sglang", "/var/log/gpuops-sglang")
UNITS = "/etc/systemd/system/gpuops-sglang-*.service"


def tagged_pids():
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if any(entry.startswith(TAGS) for entry in environ):
            pids.append(int(name))
    return pids


def remove_units():
    """Units of sglang_launcher: systemd, stopped first so systemd cannot restart what is killed below."""
    units = glob.glob(UNITS)
    if not units:
        return
    names = [os.path.basename(unit) for unit in units]
    subprocess.run(["systemctl", "disable", "--now", *names], check=False, capture_output=True)
    for unit in units:
        os.unlink(unit)
    subprocess.run(["systemctl", "daemon-reload"], check=False)
    subprocess.run(["systemctl", "reset-failed"], check=False)


def main():
    remove_units()
    killed = tagged_pids()
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 15
    while tagged_pids():
        if time.monotonic() > deadline:
            sys.exit(f"still alive after SIGKILL: {tagged_pids()}")
        time.sleep(0.1)
    for path in PATHS:
        shutil.rmtree(path, ignore_errors=True)
    print(f"killed {len(killed)} processes: {killed}")


main()
