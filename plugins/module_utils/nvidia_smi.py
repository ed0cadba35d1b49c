# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running ``nvidia-smi --query-*`` and parsing its CSV output.

``run`` is any callable ``run(argv) -> (rc, stdout, stderr)``. Use ``bounded_runner(timeout)``: a hung driver
makes nvidia-smi block for ever, and ``AnsibleModule.run_command`` has no timeout.
"""

import collections
import os
import re
import shlex
import shutil

from ansible_collections.gpuops.sglang.plugins.module_utils.bounded_command import (
    CommandNotRun,
    CommandTimedOut,
    run_bounded,
)

# Seconds nvidia-smi gets to answer (default of the modules' nvidia_smi_timeout option).
DEFAULT_NVIDIA_SMI_TIMEOUT = 30

Field = collections.namedtuple("Field", ["query", "key", "convert"])


class NvidiaSmiError(Exception):
    """nvidia-smi is missing or failed; the message is meant for the user."""


def _mib(value):
    # `nounits` gives "1234"; without it nvidia-smi prints "1234 MiB".
    return int(value.split()[0])


# "00000000:00:06.0": a GPU line cut short inside its last column no longer has this shape.
_PCI_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")


def _pci_bus_id(value):
    if not _PCI_BUS_ID.match(value):
        raise ValueError(value)
    return value


GPU_FIELDS = (
    Field("index", "index", int),
    Field("uuid", "uuid", str),
    Field("name", "name", str),
    Field("memory.used", "memory_used_mib", _mib),
    Field("memory.total", "memory_total_mib", _mib),
    Field("memory.free", "memory_free_mib", _mib),
    Field("pci.bus_id", "pci_bus_id", _pci_bus_id),
)

COMPUTE_APP_FIELDS = (
    Field("pid", "pid", int),
    Field("gpu_uuid", "gpu_uuid", str),
    Field("used_memory", "used_memory_mib", _mib),
    Field("process_name", "process_name", str),
)

# Values nvidia-smi prints instead of data ("[N/A]", "[Not Supported]", "[Insufficient Permissions]", ...).
_NO_VALUE_PREFIXES = ("[", "N/A")

_KNOWN_FAILURES = (
    ("Driver/library version mismatch",
     ("the NVIDIA user-space libraries do not match the loaded kernel driver; in an LXC container the "
      "container's driver libraries must be exactly the host's version (reboot the host after a driver "
      "update, or install the host's version in the container)")),
    ("couldn't communicate with the NVIDIA driver",
     "the NVIDIA kernel driver is not loaded or its device nodes are not visible here"),
)


def parse_csv(text, fields):
    """Parse ``--format=csv[,noheader][,nounits]`` output into one dict per row, keyed by ``Field.key``.

    A header line is recognised and skipped; placeholders such as ``[N/A]`` become None. Only the
    last field may contain commas (nvidia-smi does not quote), so put free text last when querying.
    """
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if cells[0] == fields[0].query:
            continue
        if len(cells) > len(fields) and fields[-1].convert is str:
            cells = cells[:len(fields) - 1] + [", ".join(cells[len(fields) - 1:])]
        if len(cells) != len(fields):
            raise NvidiaSmiError(
                f"unexpected nvidia-smi output: expected {len(fields)} columns "
                f"({','.join(field.query for field in fields)}), got {len(cells)} in {line!r}")
        row = {}
        for field, cell in zip(fields, cells):
            if cell.startswith(_NO_VALUE_PREFIXES):
                row[field.key] = None
                continue
            try:
                row[field.key] = field.convert(cell)
            except (ValueError, IndexError):
                raise NvidiaSmiError(f"unexpected nvidia-smi value {cell!r} for {field.query} in {line!r}")
        rows.append(row)
    return rows


def bounded_runner(timeout=DEFAULT_NVIDIA_SMI_TIMEOUT):
    """A ``run(argv) -> (rc, stdout, stderr)`` that gives the command ``timeout`` seconds.

    The command runs in its own session; when it does not answer in time its whole process group is
    SIGKILLed and NvidiaSmiError says which command hung.
    """
    def run(argv):
        try:
            return run_bounded(argv, timeout)
        except CommandNotRun as exc:
            raise NvidiaSmiError(str(exc))
        except CommandTimedOut:
            raise NvidiaSmiError(
                f"{shlex.join(argv)} did not answer within {timeout:g} s (nvidia_smi_timeout); the driver may be "
                "hung: check `nvidia-smi` on the host")
    return run


def resolve_binary(nvidia_smi):
    """Absolute path of the nvidia-smi executable, or NvidiaSmiError naming what was looked for."""
    if os.sep in nvidia_smi:
        if os.path.isfile(nvidia_smi) and os.access(nvidia_smi, os.X_OK):
            return nvidia_smi
        raise NvidiaSmiError(f"nvidia-smi not found: {nvidia_smi} is not an executable file")
    found = shutil.which(nvidia_smi)
    if not found:
        raise NvidiaSmiError(
            f"nvidia-smi not found: no {nvidia_smi!r} in PATH ({os.environ.get('PATH', '')}); is the NVIDIA "
            "driver installed here, or set the nvidia_smi option to its path")
    return found


def _query(run, nvidia_smi, query_option, fields, extra_args=()):
    queried = ",".join(field.query for field in fields)
    argv = [resolve_binary(nvidia_smi), f"{query_option}={queried}", "--format=csv,noheader,nounits", *extra_args]
    rc, stdout, stderr = run(argv)
    if rc != 0:
        # nvidia-smi prints its errors on stdout.
        output = " ".join(part.strip() for part in (stdout, stderr) if part and part.strip()) or "no output"
        failure = f"{' '.join(argv)} failed (rc={rc}): {output}"
        for needle, explanation in _KNOWN_FAILURES:
            if needle in output:
                failure += f". Cause: {explanation}"
        raise NvidiaSmiError(failure)
    # nvidia-smi ends every line with a newline: output without one was cut short.
    if stdout and not stdout.endswith("\n"):
        raise NvidiaSmiError(f"{' '.join(argv)} printed truncated output (no final newline): {stdout[-200:]!r}")
    return parse_csv(stdout, fields)


def query_gpus(run, nvidia_smi="nvidia-smi", ids=None):
    """One dict per GPU: index, uuid, name, memory_used_mib, memory_total_mib, memory_free_mib."""
    extra = ["--id=" + ",".join(str(gpu) for gpu in ids)] if ids else []
    gpus = _query(run, nvidia_smi, "--query-gpu", GPU_FIELDS, extra)
    # A host without GPUs makes nvidia-smi fail ("No devices were found"), so no line at all is not "0 GPUs".
    if not gpus or (ids and len(gpus) != len(ids)):
        wanted = f"{len(ids)} lines (--id={','.join(str(gpu) for gpu in ids)})" if ids else "one line per GPU"
        raise NvidiaSmiError(f"nvidia-smi --query-gpu printed {len(gpus)} GPU lines, expected {wanted}; "
                             "its output was empty or cut short")
    return gpus


DRIVER_GPUS_DIR = "/proc/driver/nvidia/gpus"
_DEVICE_MINOR = re.compile(r"^Device Minor:[ \t]*(\d+)", re.MULTILINE | re.ASCII)


def device_minors(gpus, driver_dir=DRIVER_GPUS_DIR):
    """GPU index -> minor number N of its device node ``nvidia<N>``.

    They differ where a container is given some of the host's GPUs: nvidia-smi numbers them from 0, the
    device nodes keep the host's minors. The driver's per-GPU ``information`` file (found by PCI bus id)
    says which is which; where it cannot be read, the index is taken for the minor.
    """
    minors = {}
    for gpu in gpus:
        minors[gpu["index"]] = gpu["index"]
        domain, _sep, rest = (gpu.get("pci_bus_id") or "").partition(":")
        if not rest:
            continue
        try:
            # nvidia-smi prints an 8-digit domain ("00000000:00:06.0"), the driver's directory a 4-digit one.
            location = f"{int(domain, 16):04x}:{rest.lower()}"
            with open(os.path.join(driver_dir, location, "information")) as handle:
                match = _DEVICE_MINOR.search(handle.read())
        except (OSError, ValueError):
            continue
        if match:
            minors[gpu["index"]] = int(match.group(1))
    return minors


def query_compute_apps(run, nvidia_smi="nvidia-smi"):
    """One dict per process NVML reports (empty inside containers: NVML is not PID-namespace aware)."""
    return _query(run, nvidia_smi, "--query-compute-apps", COMPUTE_APP_FIELDS)
