#!/usr/bin/env python3
"""Fake GPUs and a byte-compatible fake ``nvidia-smi`` (stdlib only).

A GPU state directory holds:
  gpus.json              the GPUs (name, uuid, total/reserved MiB, bus id) and host settings
  alloc/<pid>-<gpu>.json memory a process holds on a GPU (with the pid's starttime)
  dev/nvidia<M>          plain files standing in for device nodes (M = the GPU's device minor); holders
                         keep them open
  driver/gpus/<bus>/information
                         like /proc/driver/nvidia/gpus: maps a GPU's PCI bus id to its "Device Minor"
  bin/nvidia-smi         wrapper running this file with the state dir baked in
  nvidia-smi-fault       optional: how nvidia-smi misbehaves (see NVIDIA_SMI_FAULTS)

Memory used on GPU N is the sum of the allocations of live processes. A dead process's allocation
keeps counting for its ``release_delay`` after it is first seen dead, like the driver's deferred
teardown, then the file is removed.

CLI:
  fakegpu.py init <dir> --count 8 [--name "NVIDIA H200"] [--total-mib 143771] [--reserved-mib 615]
                        [--hide-compute-apps] [--release-delay S] [--fail driver_mismatch]
                        [--minor-offset K]   (device minors K..K+count-1, as in a container given
                                              host GPUs K.. while nvidia-smi numbers them from 0)
  fakegpu.py fault <dir> hang|empty|truncated|mismatch|none
                        hang: never answers; empty: prints nothing (rc 0); truncated: output cut in the middle
                        of the last line, no final newline (rc 0); mismatch: the driver/library version
                        mismatch message, exit 18; none: behave again
  fakegpu.py nvidia-smi --state-dir <dir> [nvidia-smi arguments]
"""

import argparse
import hashlib
import json
import os
import shlex
import signal
import sys
import time

DRIVER_VERSION = "580.159.04"
CUDA_VERSION = "13.0"
NVML_LIBRARY_VERSION = "580.159"
TABLE_WIDTH = 91
# The machine's own python3 by its path (on Debian a build with optimizations, as on a GPU host), else the one running
# this - never python3 looked up on PATH, which can be a pyenv shim costing ~0.1 s of CPU in a dozen bash processes.
MACHINE_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

# --query-gpu fields: canonical name -> (unit shown in headers and values, getter)
GPU_FIELDS = {
    "index": (None, lambda gpu: str(gpu["index"])),
    "uuid": (None, lambda gpu: gpu["uuid"]),
    "name": (None, lambda gpu: gpu["name"]),
    "serial": (None, lambda gpu: gpu["serial"]),
    "pci.bus_id": (None, lambda gpu: gpu["bus_id"]),
    "driver_version": (None, lambda gpu: DRIVER_VERSION),
    "persistence_mode": (None, lambda gpu: "Enabled"),
    "compute_mode": (None, lambda gpu: "Default"),
    "pstate": (None, lambda gpu: "P0"),
    "memory.total": ("MiB", lambda gpu: str(gpu["total_mib"])),
    "memory.reserved": ("MiB", lambda gpu: str(gpu["reserved_mib"])),
    "memory.used": ("MiB", lambda gpu: str(gpu["used_mib"])),
    "memory.free": ("MiB", lambda gpu: str(gpu["free_mib"])),
    "utilization.gpu": ("%", lambda gpu: str(gpu["utilization"])),
    "utilization.memory": ("%", lambda gpu: str(gpu["utilization"])),
    "temperature.gpu": (None, lambda gpu: str(gpu["temperature_c"])),
    "power.draw": ("W", lambda gpu: f"{gpu['power_w']:.2f}"),
    "power.limit": ("W", lambda gpu: f"{gpu['power_limit_w']:.2f}"),
}
GPU_FIELD_ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_serial": "serial",
    "gpu_bus_id": "pci.bus_id",
}
APP_FIELDS = {
    "pid": (None, lambda app: str(app["pid"])),
    "process_name": (None, lambda app: app["process_name"]),
    "gpu_uuid": (None, lambda app: app["gpu_uuid"]),
    "gpu_name": (None, lambda app: app["gpu_name"]),
    "gpu_bus_id": (None, lambda app: app["gpu_bus_id"]),
    "gpu_serial": (None, lambda app: app["gpu_serial"]),
    "used_gpu_memory": ("MiB", lambda app: str(app["used_mib"])),
}
APP_FIELD_ALIASES = {"name": "process_name", "used_memory": "used_gpu_memory"}


NVIDIA_SMI_FAULTS = ("hang", "empty", "truncated", "mismatch")
# What the real nvidia-smi prints (on stdout) and its exit code when the user-space libraries do not match the
# loaded kernel driver.
DRIVER_MISMATCH = (
    f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {NVML_LIBRARY_VERSION}\n",
    18,
)


class NvidiaSmiExit(Exception):
    """Ends an nvidia-smi run with a message on stdout (where nvidia-smi prints errors) and an exit code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.message = message
        self.code = code


# --- state directory -----------------------------------------------------------------------------


def _gpus_file(state_dir):
    return os.path.join(state_dir, "gpus.json")


def _alloc_dir(state_dir):
    return os.path.join(state_dir, "alloc")


def device_path(state_dir, gpu_index):
    """The stand-in device node of GPU ``gpu_index`` (named by its device minor, like /dev/nvidia<minor>)."""
    gpu = load_config(state_dir)["gpus"][gpu_index]
    return os.path.join(state_dir, "dev", f"nvidia{gpu.get('minor', gpu_index)}")


def driver_gpus_dir(state_dir):
    """The stand-in for /proc/driver/nvidia/gpus."""
    return os.path.join(state_dir, "driver", "gpus")


def _write_driver_information(state_dir, gpu):
    # /proc/driver/nvidia/gpus/<domain:bus:dev.fn>/information: a 4-digit domain, lower case.
    domain, rest = gpu["bus_id"].split(":", 1)
    location = f"{int(domain, 16):04x}:{rest.lower()}"
    directory = os.path.join(driver_gpus_dir(state_dir), location)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "information"), "w") as handle:
        handle.write(f"Model: \t\t {gpu['name']}\nGPU UUID: \t {gpu['uuid']}\nBus Type: \t PCIe\n"
                     f"Bus Location: \t {location}\nDevice Minor: \t {gpu['minor']}\nGPU Excluded:\t No\n")


def _write_json_atomic(path, data):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as handle:
        json.dump(data, handle, sort_keys=True)
    os.replace(tmp, path)


def _read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        # Missing, or removed/replaced between listing and reading: nothing to count.
        return None


def _uuid_for(state_dir, index):
    digest = hashlib.sha256(f"{os.path.abspath(state_dir)}:{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def init(state_dir, count=8, name="NVIDIA H200", total_mib=143771, reserved_mib=615,
         hide_compute_apps=False, release_delay=0.0, fail=None, minor_offset=0):
    """Create (or update, keeping allocations) a GPU state directory; returns the gpus.json content."""
    state_dir = os.path.abspath(state_dir)
    for sub in ("alloc", "dev", "bin"):
        os.makedirs(os.path.join(state_dir, sub), exist_ok=True)
    gpus = []
    for index in range(count):
        gpus.append({
            "index": index,
            "name": name,
            "uuid": _uuid_for(state_dir, index),
            "serial": str(1653724033119 + index),
            "bus_id": "00000000:00:%02X.0" % (6 + index),
            "total_mib": total_mib,
            "reserved_mib": reserved_mib,
            "temperature_c": 35,
            "power_w": 124,
            "power_limit_w": 700,
            "minor": minor_offset + index,
        })
    config = {
        "gpus": gpus,
        "hide_compute_apps": hide_compute_apps,
        "release_delay": release_delay,
        "fail": fail,
    }
    _write_json_atomic(_gpus_file(state_dir), config)
    for gpu in gpus:
        open(device_path(state_dir, gpu["index"]), "a").close()
        _write_driver_information(state_dir, gpu)
    wrapper = os.path.join(state_dir, "bin", "nvidia-smi")
    with open(wrapper, "w") as handle:
        # A real nvidia-smi answers in milliseconds.
        script = shlex.quote(os.path.abspath(__file__))
        python = shlex.quote(MACHINE_PYTHON)
        handle.write(f'#!/bin/sh\nexec {python} {script} nvidia-smi --state-dir {shlex.quote(state_dir)} "$@"\n')
    os.chmod(wrapper, 0o755)
    return config


def _fault_file(state_dir):
    return os.path.join(state_dir, "nvidia-smi-fault")


def set_fault(state_dir, fault):
    """Make nvidia-smi of ``state_dir`` misbehave (one of NVIDIA_SMI_FAULTS), or behave again (None)."""
    if fault is None:
        try:
            os.unlink(_fault_file(state_dir))
        except FileNotFoundError:
            pass
        return
    if fault not in NVIDIA_SMI_FAULTS:
        raise ValueError(f"unknown nvidia-smi fault {fault!r}; one of {', '.join(NVIDIA_SMI_FAULTS)}")
    with open(_fault_file(state_dir), "w") as handle:
        handle.write(fault + "\n")


def current_fault(state_dir):
    try:
        with open(_fault_file(state_dir)) as handle:
            return handle.read().strip() or None
    except FileNotFoundError:
        return None


def load_config(state_dir):
    config = _read_json(_gpus_file(state_dir))
    if config is None:
        raise FileNotFoundError(f"no fake GPU state in {state_dir} (run fakegpu.py init)")
    return config


def _process_starttime(pid):
    """Field 22 of /proc/<pid>/stat, or None when the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _argv0(pid):
    """argv[0] as the process shows it now (setproctitle included); None when unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            first = handle.read().split(b"\0", 1)[0].decode("utf-8", "replace").strip()
    except OSError:
        return None
    return first or None


def allocate(state_dir, pid, gpu_index, mib, process_name, release_delay=None):
    """Add ``mib`` to what ``pid`` holds on ``gpu_index`` (allocations only grow, like a CUDA pool)."""
    path = os.path.join(_alloc_dir(state_dir), f"{pid}-{gpu_index}.json")
    current = _read_json(path) or {
        "pid": pid,
        "gpu": gpu_index,
        "mib": 0,
        "starttime": _process_starttime(pid),
        "dead_since": None,
    }
    current["mib"] += int(mib)
    current["process_name"] = process_name
    if release_delay is not None:
        current["release_delay"] = release_delay
    _write_json_atomic(path, current)


def open_device(state_dir, gpu_index):
    """Open the stand-in device node; the caller keeps it open, as CUDA keeps /dev/nvidia<N> open."""
    return open(device_path(state_dir, gpu_index), "rb")


def live_allocations(state_dir, config=None, now=None):
    """Allocations that still count; expires those of processes dead for longer than their delay."""
    config = config or load_config(state_dir)
    now = time.time() if now is None else now
    alloc_dir = _alloc_dir(state_dir)
    result = []
    for entry in sorted(os.listdir(alloc_dir)):
        if not entry.endswith(".json"):
            continue
        path = os.path.join(alloc_dir, entry)
        alloc = _read_json(path)
        if alloc is None:
            continue
        alive = alloc["starttime"] is not None and _process_starttime(alloc["pid"]) == alloc["starttime"]
        if not alive:
            delay = alloc.get("release_delay", config["release_delay"])
            if alloc["dead_since"] is None:
                alloc["dead_since"] = now
                _write_json_atomic(path, alloc)
            if now - alloc["dead_since"] >= delay:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                continue
        alloc["alive"] = alive
        result.append(alloc)
    return result


def gpu_status(state_dir):
    """The GPUs with current memory figures, and the compute apps (live holders) on them."""
    config = load_config(state_dir)
    allocations = live_allocations(state_dir, config)
    gpus = []
    for gpu in config["gpus"]:
        gpu = dict(gpu)
        gpu["used_mib"] = sum(a["mib"] for a in allocations if a["gpu"] == gpu["index"])
        gpu["free_mib"] = gpu["total_mib"] - gpu["reserved_mib"] - gpu["used_mib"]
        gpu["utilization"] = 0
        gpus.append(gpu)
    by_index = {gpu["index"]: gpu for gpu in gpus}
    apps = []
    for alloc in allocations:
        gpu = by_index.get(alloc["gpu"])
        if gpu is None or not alloc["alive"]:
            continue
        apps.append({
            "pid": alloc["pid"],
            "gpu_index": gpu["index"],
            "gpu_uuid": gpu["uuid"],
            "gpu_name": gpu["name"],
            "gpu_bus_id": gpu["bus_id"],
            "gpu_serial": gpu["serial"],
            # Like NVML (seen on an H200): argv[0] as the process was started or retitled,
            # e.g. "/opt/torch/.venv/bin/python3" or "sglang::scheduler_TP0".
            "process_name": _argv0(alloc["pid"]) or alloc["process_name"],
            # NVML reports the context's usage slightly below the device total (see busy.txt).
            "used_mib": max(alloc["mib"] - 9, 0),
        })
    apps.sort(key=lambda app: (app["gpu_index"], app["pid"]))
    return config, gpus, apps


def free_mib(state_dir, gpu_index):
    """memory.free of one GPU, what torch.cuda.mem_get_info would report."""
    gpus = gpu_status(state_dir)[1]
    return gpus[gpu_index]["free_mib"]


# --- nvidia-smi ----------------------------------------------------------------------------------


def _parse_smi_args(argv):
    """nvidia-smi style options: ``--opt=value``, ``--opt value``, ``-i value``."""
    with_value = {"--query-gpu", "--query-compute-apps", "--format", "--id", "-i"}
    options = {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        name, has_eq, value = arg.partition("=")
        if name in with_value:
            if not has_eq:
                index += 1
                if index >= len(argv):
                    raise NvidiaSmiExit(f"Option {name} requires an argument.\n", 2)
                value = argv[index]
            options["--id" if name == "-i" else name] = value
        elif arg in ("-L", "--list-gpus"):
            options["-L"] = True
        else:
            raise NvidiaSmiExit('Invalid combination of input arguments. Please run '
                                '\'nvidia-smi -h\' for help.\n', 2)
        index += 1
    return options


def _select_gpus(gpus, ids):
    if ids is None:
        return gpus
    selected = []
    for wanted in ids.split(","):
        wanted = wanted.strip()
        match = [g for g in gpus if str(g["index"]) == wanted or g["uuid"] == wanted
                 or g["bus_id"] == wanted]
        if not match:
            raise NvidiaSmiExit("No devices were found\n", 6)
        selected.extend(match)
    return selected


def _format_csv(fields, table, rows, format_spec):
    format_options = {part.strip() for part in format_spec.split(",")}
    if not format_options <= {"csv", "noheader", "nounits"} or "csv" not in format_options:
        raise NvidiaSmiExit(f'"{format_spec}" is not a valid format.\n', 2)
    columns = []
    for field in fields:
        if field not in table:
            raise NvidiaSmiExit(f'Field "{field}" is not a valid field to query.\n\n', 2)
        columns.append((field, table[field][0], table[field][1]))
    lines = []
    if "noheader" not in format_options:
        lines.append(", ".join(f"{field} [{unit}]" if unit else field for field, unit, _getter in columns))
    for row in rows:
        values = []
        for _field, unit, getter in columns:
            value = getter(row)
            values.append(value if not unit or "nounits" in format_options else f"{value} {unit}")
        lines.append(", ".join(values))
    return "".join(line + "\n" for line in lines)


def _canonical_fields(spec, aliases):
    return [aliases.get(field.strip(), field.strip()) for field in spec.split(",") if field.strip()]


def _row(*cells):
    return "|" + "|".join(cells) + "|\n"


def _plain_table(gpus, apps, hide_apps):
    border = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+\n"
    out = [time.asctime() + "       \n"]
    out.append("+" + "-" * (TABLE_WIDTH - 2) + "+\n")
    out.append(_row(f" NVIDIA-SMI {DRIVER_VERSION:<22} Driver Version: {DRIVER_VERSION:<14} "
                    f"CUDA Version: {CUDA_VERSION:<9}"))
    out.append(border)
    out.append(_row(" GPU  Name                 Persistence-M ", " Bus-Id          Disp.A ",
                    " Volatile Uncorr. ECC "))
    out.append(_row(" Fan  Temp   Perf          Pwr:Usage/Cap ", "           Memory-Usage ",
                    " GPU-Util  Compute M. "))
    out.append(_row(" " * 41, " " * 24, "               MIG M. "))
    out.append("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|\n")
    for gpu in gpus:
        power = f"{gpu['power_w']}W"
        used = f"{gpu['used_mib']}MiB"
        total = f"{gpu['total_mib']}MiB"
        out.append(_row(f" {gpu['index']:>3}  {gpu['name'][:29]:<29}  On  ", f" {gpu['bus_id']:>18} Off ",
                        f"{'0':>21} "))
        out.append(_row(f" N/A   {gpu['temperature_c']:>2}C    P0{power:>16} / {gpu['power_limit_w']:>4}W ",
                        f" {used:>10} / {total:<9} ", f" {gpu['utilization']:>6}%      Default "))
        out.append(_row(" " * 41, " " * 24, "             Disabled "))
        out.append(border)
    out.append("\n")
    out.append("+" + "-" * (TABLE_WIDTH - 2) + "+\n")
    out.append(_row(" Processes:".ljust(TABLE_WIDTH - 2)))
    out.append(_row("  GPU   GI   CI              PID   Type   Process name                        GPU Memory "))
    out.append(_row("        ID   ID                                                               Usage      "))
    out.append("|" + "=" * (TABLE_WIDTH - 2) + "|\n")
    shown = [] if hide_apps else apps
    if not shown:
        out.append(_row("  No running processes found".ljust(TABLE_WIDTH - 2)))
    for app in shown:
        name = app["process_name"]
        if len(name) > 37:
            name = "..." + name[-34:]
        left = f"  {app['gpu_index']:>3}   N/A  N/A  {app['pid']:>14}      C   {name}"
        out.append(_row(left + f"{app['used_mib']}MiB ".rjust(TABLE_WIDTH - 2 - len(left))))
    out.append("+" + "-" * (TABLE_WIDTH - 2) + "+\n")
    return "".join(out)


def nvidia_smi(state_dir, argv):
    """Run one nvidia-smi invocation; returns (stdout text, exit code)."""
    fault = current_fault(state_dir)
    if fault == "hang":
        # Like nvidia-smi stuck in a hung driver: only SIGKILL ends it.
        for stop_signal in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(stop_signal, signal.SIG_IGN)
        while True:
            signal.pause()
    if fault == "empty":
        return "", 0
    output, code = _answer(state_dir, argv)
    if fault == "truncated" and code == 0:
        # The output stops in the middle of its last line.
        return output.rstrip("\n")[:-5], 0
    return output, code


def _answer(state_dir, argv):
    try:
        config = load_config(state_dir)
        if config.get("fail") == "driver_mismatch" or current_fault(state_dir) == "mismatch":
            raise NvidiaSmiExit(*DRIVER_MISMATCH)
        options = _parse_smi_args(argv)
        _config, gpus, apps = gpu_status(state_dir)
        gpus = _select_gpus(gpus, options.get("--id"))
        if "-L" in options:
            return "".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n" for g in gpus), 0
        if "--query-gpu" in options or "--query-compute-apps" in options:
            if "--format" not in options:
                raise NvidiaSmiExit("Option --format must be specified with a query option.\n", 2)
            if "--query-gpu" in options:
                fields = _canonical_fields(options["--query-gpu"], GPU_FIELD_ALIASES)
                return _format_csv(fields, GPU_FIELDS, gpus, options["--format"]), 0
            fields = _canonical_fields(options["--query-compute-apps"], APP_FIELD_ALIASES)
            selected = {g["index"] for g in gpus}
            rows = [] if config["hide_compute_apps"] else [a for a in apps if a["gpu_index"] in selected]
            return _format_csv(fields, APP_FIELDS, rows, options["--format"]), 0
        return _plain_table(gpus, apps, config["hide_compute_apps"]), 0
    except NvidiaSmiExit as exc:
        return exc.message, exc.code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    init_parser = commands.add_parser("init", help="create or update a GPU state directory")
    init_parser.add_argument("state_dir")
    init_parser.add_argument("--count", type=int, default=8)
    init_parser.add_argument("--name", default="NVIDIA H200")
    init_parser.add_argument("--total-mib", type=int, default=143771)
    init_parser.add_argument("--reserved-mib", type=int, default=615)
    init_parser.add_argument("--hide-compute-apps", action="store_true",
                             help="NVML inside a container: no per-process information")
    init_parser.add_argument("--release-delay", type=float, default=0.0,
                             help="seconds a dead process's memory keeps counting")
    init_parser.add_argument("--fail", choices=["driver_mismatch"])
    init_parser.add_argument("--minor-offset", type=int, default=0,
                             help="device minor of GPU 0 (a container given host GPUs K.. sees them as 0..)")
    fault_parser = commands.add_parser("fault", help="make nvidia-smi of a GPU state directory misbehave")
    fault_parser.add_argument("state_dir")
    fault_parser.add_argument("fault", choices=NVIDIA_SMI_FAULTS + ("none",))
    commands.add_parser("nvidia-smi", help="behave as nvidia-smi: nvidia-smi --state-dir DIR [ARGS]")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["nvidia-smi"]:
        # Parsed by hand: argparse would take nvidia-smi's own options for its own.
        if len(argv) < 3 or argv[1] != "--state-dir":
            parser.error("usage: fakegpu.py nvidia-smi --state-dir DIR [nvidia-smi arguments]")
        output, code = nvidia_smi(argv[2], argv[3:])
        sys.stdout.write(output)
        return code
    args = parser.parse_args(argv)
    if args.command == "fault":
        set_fault(args.state_dir, None if args.fault == "none" else args.fault)
        return 0
    init(args.state_dir, args.count, args.name, args.total_mib, args.reserved_mib,
         args.hide_compute_apps, args.release_delay, args.fail, args.minor_offset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
