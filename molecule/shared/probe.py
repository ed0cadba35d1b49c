"""Snapshot of a rig container for the testinfra checks, printed as one JSON document.

Runs inside the container (python3 -c, stdlib only) so a whole host is inspected in one round trip
through proxmox_pct_remote. Reads /proc, the fake GPUs' allocation files and nvidia-smi directly:
it shares no code with the collection it checks. argv[1]: JSON {"ports", "fake_gpu_dir", "script_dir"}, and
optionally "journal" (a run journal's path: its records are returned) and "versions" (true: the version each
port's server reports on /server_info).
"""

import glob
import json
import os
import re
import stat
import subprocess
import sys
import urllib.error
import urllib.request

MARKER = "GPUOPS_SGLANG_SERVER"


def read(path, mode="r"):
    try:
        with open(path, mode) as handle:
            return handle.read()
    except OSError:
        return None


def gpus_held(pid, device_dir):
    held = set()
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        match = re.fullmatch(re.escape(device_dir) + r"/nvidia(\d+)", target)
        if match:
            held.add(int(match.group(1)))
    return sorted(held)


def processes(device_dir):
    """Every process that carries the marker or holds a GPU device."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        environ = read(f"/proc/{name}/environ", "rb")
        stat_line = read(f"/proc/{name}/stat")
        if environ is None or stat_line is None:
            continue
        env = dict(item.split("=", 1) for item in environ.decode(errors="replace").split("\0") if "=" in item)
        gpus = gpus_held(name, device_dir)
        if MARKER not in env and not gpus:
            continue
        fields = stat_line.rsplit(")", 1)[1].split()
        found.append({
            "pid": int(name),
            "state": fields[0],
            "ppid": int(fields[1]),
            "server": env.get(MARKER),
            "cmdline": (read(f"/proc/{name}/cmdline", "rb") or b"").replace(b"\0", b" ").decode().strip(),
            "nccl": {key: value for key, value in env.items() if key.startswith("NCCL_")},
            "gpus": gpus,
            "cgroup": (read(f"/proc/{name}/cgroup") or "").strip(),
        })
    return found


def health(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health_generate", timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def reported_version(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=30) as response:
            return json.loads(response.read()).get("version")
    except (OSError, ValueError):
        return None


def journal(path):
    return [json.loads(line) for line in (read(path) or "").splitlines() if line.strip()]


def gpu_memory():
    output = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                            check=True, capture_output=True, text=True).stdout
    return {int(index): int(used) for index, used in (line.split(",") for line in output.splitlines() if line)}


def allocations(fake_gpu_dir):
    result = []
    for path in sorted(glob.glob(f"{fake_gpu_dir}/alloc/*.json")):
        alloc = json.loads(read(path) or "null")
        if alloc:
            result.append({"pid": alloc["pid"], "gpu": alloc["gpu"], "mib": alloc["mib"]})
    return result


def scripts(script_dir):
    return {path: {"mode": stat.S_IMODE(os.stat(path).st_mode), "content": read(path)}
            for path in sorted(glob.glob(f"{script_dir}/*.sh"))}


def main():
    spec = json.loads(sys.argv[1])
    device_dir = f"{spec['fake_gpu_dir']}/dev"
    found = {
        "processes": processes(device_dir),
        "health": {str(port): health(port) for port in spec["ports"]},
        "gpu_memory_mib": gpu_memory(),
        "allocations": allocations(spec["fake_gpu_dir"]),
        "scripts": scripts(spec["script_dir"]),
    }
    if spec.get("journal"):
        found["journal"] = journal(spec["journal"])
    if spec.get("versions"):
        found["versions"] = {str(port): reported_version(port) for port in spec["ports"]}
    print(json.dumps(found))


main()
