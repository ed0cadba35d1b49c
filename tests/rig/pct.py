#!/usr/bin/python3
# gpuops-rig pct stand-in: installed as /usr/sbin/pct by tests/rig/rig.py, removed by `rig.py down`.
"""Stand-in for Proxmox VE's ``pct`` on top of plain LXC.

Implements the subcommands the rig and its tests need with the behaviour of PVE 8's ``pct``
(pve-container ``src/PVE/CLI/pct.pm``): ``exec`` loads the CT config, refuses stopped CTs,
drops SSL_CERT_FILE/SSL_CERT_DIR (``clean_environment()``) and execs
``lxc-attach -n <vmid> --keep-env|--clear-env -- <args>``, so stdin, stdout and the exit code
pass through untouched.  Every invocation appends one JSON line to the call log so tests can
count round trips.
"""

import json
import os
import socket
import subprocess
import sys
import time

LXC_PATH = "/var/lib/lxc"
# Replaced by rig.py at install time; GPUOPS_RIG_PCT_LOG overrides it.
CALL_LOG = "/var/tmp/gpuops-rig/pct-calls.log"
# PVE::CLIHandler::run_cli_handler sets this PATH before any command; with --keep-env 1 (the
# default) it is the PATH commands see inside the CT, so /usr/local/bin is NOT on it.
PVE_CLI_PATH = "/sbin:/bin:/usr/sbin:/usr/bin"
USAGE = """\
USAGE: pct <COMMAND> [ARGS] [OPTIONS]
       pct exec <vmid> [--keep-env <boolean>] -- <extra-args>...
       pct status <vmid>
       pct start <vmid>
       pct stop <vmid>
       pct list
       pct push <vmid> <file> <destination> [--perms <string>]
       pct pull <vmid> <path> <destination>
"""


class PctError(Exception):
    """A failure reported like PVE's CLI: message on stderr, exit status 2."""


def log_call(argv):
    entry = {"time": time.time(), "pid": os.getpid(), "argv": argv}
    path = os.environ.get("GPUOPS_RIG_PCT_LOG", CALL_LOG)
    try:
        # One write on an O_APPEND descriptor: lines of concurrent callers never interleave.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # the log is a test aid; pct must work without it


def parse_bool(value):
    if value.lower() in ("1", "yes", "true", "on"):
        return True
    if value.lower() in ("0", "no", "false", "off"):
        return False
    raise PctError(f"400 Parameter verification failed.\nkeep-env: type check ('boolean') failed - got '{value}'")


def load_config(vmid):
    """Die like PVE::LXC::Config->load_config for a CT that does not exist on this node."""
    if not vmid.isdigit() or not os.path.isfile(os.path.join(LXC_PATH, vmid, "config")):
        node = socket.gethostname().split(".")[0]
        raise PctError(f"Configuration file 'nodes/{node}/lxc/{vmid}.conf' does not exist")


def lxc_state(vmid):
    result = subprocess.run(["lxc-info", "-n", vmid, "-s", "-H"], check=False, capture_output=True, text=True)
    return result.stdout.strip().lower() if result.returncode == 0 else "unknown"


def check_running(vmid):
    return lxc_state(vmid) == "running"


def require_running(vmid):
    load_config(vmid)
    if not check_running(vmid):
        raise PctError(f"container '{vmid}' not running!")


def attach_command(vmid, args, keep_env=False):
    return ["lxc-attach", "-n", vmid, "--keep-env" if keep_env else "--clear-env", "--"] + args


def cmd_exec(args):
    if not args:
        raise PctError("400 not enough arguments\n" + USAGE)
    vmid, rest = args[0], args[1:]
    keep_env = True  # PVE 8 default; PVE 9 is announced to switch to 0
    extra = []
    while rest:
        option = rest.pop(0)
        if option == "--":
            extra = rest
            break
        if option in ("--keep-env", "-keep-env"):
            if not rest:
                raise PctError("400 Parameter verification failed.\nkeep-env: missing value")
            keep_env = parse_bool(rest.pop(0))
        elif option.startswith("--keep-env="):
            keep_env = parse_bool(option.split("=", 1)[1])
        else:
            extra = [option] + rest
            break
    require_running(vmid)
    if not extra:
        raise PctError("missing command")
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):  # clean_environment()
        os.environ.pop(name, None)
    command = attach_command(vmid, extra, keep_env)
    os.execvp(command[0], command)


def cmd_status(args):
    (vmid,) = expect_args(args, 1)
    load_config(vmid)
    print(f"status: {'running' if check_running(vmid) else 'stopped'}")


def cmd_start(args):
    (vmid,) = expect_args(args, 1)
    load_config(vmid)
    if check_running(vmid):
        raise PctError(f"CT {vmid} already running")
    if subprocess.run(["lxc-start", "-n", vmid], check=False).returncode != 0:
        raise PctError(f"startup for container '{vmid}' failed")
    subprocess.run(["lxc-wait", "-n", vmid, "-s", "RUNNING", "-t", "30"], check=False)


def cmd_stop(args):
    (vmid,) = expect_args(args, 1)
    load_config(vmid)
    if not check_running(vmid):
        raise PctError(f"CT {vmid} not running")
    if subprocess.run(["lxc-stop", "-n", vmid, "--kill"], check=False).returncode != 0:
        raise PctError(f"stopping container '{vmid}' failed")


def cmd_list(args):
    if args:
        raise PctError("400 too many arguments\n" + USAGE)
    names = os.listdir(LXC_PATH) if os.path.isdir(LXC_PATH) else []
    vmids = sorted(int(name) for name in names if name.isdigit() and os.path.isfile(os.path.join(LXC_PATH, name, "config")))
    if not vmids:
        return  # real pct prints nothing, not even the header
    row = "{:<10} {:<10} {:<12} {:<20}"
    print(row.format("VMID", "Status", "Lock", "Name"))
    for vmid in vmids:
        status = "running" if check_running(str(vmid)) else "stopped"
        print(row.format(vmid, status, "", container_hostname(str(vmid))))


def container_hostname(vmid):
    try:
        with open(os.path.join(LXC_PATH, vmid, "config")) as config:
            for line in config:
                key, _sep, value = line.partition("=")
                if key.strip() == "lxc.uts.name":
                    return value.strip()
    except OSError:
        pass
    return f"CT{vmid}"


def split_perms(args):
    """Extract --perms from push/pull arguments; the rest are positional."""
    positional, perms = [], None
    args = list(args)
    while args:
        arg = args.pop(0)
        if arg in ("--perms", "-perms"):
            if not args:
                raise PctError("400 Parameter verification failed.\nperms: missing value")
            perms = args.pop(0)
        elif arg.startswith("--perms="):
            perms = arg.split("=", 1)[1]
        else:
            positional.append(arg)
    return positional, perms


def cmd_push(args):
    positional, perms = split_perms(args)
    vmid, source, destination = expect_args(positional, 3)
    load_config(vmid)
    if not check_running(vmid):
        raise PctError("can only push files to a running CT")
    script = 'cat > "$1"' + (' && chmod "$2" "$1"' if perms else "")
    try:
        with open(source, "rb") as data:
            argv = attach_command(vmid, ["/bin/sh", "-c", script, "push", destination] + ([perms] if perms else []))
            result = subprocess.run(argv, check=False, stdin=data, capture_output=True)
    except OSError:
        raise PctError(f"failed to open {source} for reading")
    if result.returncode != 0:
        raise PctError(result.stderr.decode(errors="replace").strip() or f"failed to write {destination}")


def cmd_pull(args):
    positional, perms = split_perms(args)
    vmid, path, destination = expect_args(positional, 3)
    load_config(vmid)
    if not check_running(vmid):
        raise PctError("can only pull files from a running VM")
    result = subprocess.run(attach_command(vmid, ["/bin/cat", path]), check=False, capture_output=True)
    if result.returncode != 0:
        raise PctError(f"failed to open {path}: " + result.stderr.decode(errors="replace").strip())
    with open(destination, "wb") as target:
        target.write(result.stdout)
    if perms:
        os.chmod(destination, int(perms, 0) if perms.startswith("0x") else int(perms, 8))


def expect_args(args, count):
    if len(args) != count:
        raise PctError("400 wrong number of arguments\n" + USAGE)
    return args


COMMANDS = {
    "exec": cmd_exec,
    "status": cmd_status,
    "start": cmd_start,
    "stop": cmd_stop,
    "list": cmd_list,
    "push": cmd_push,
    "pull": cmd_pull,
}


def main(argv):
    os.environ["PATH"] = PVE_CLI_PATH
    log_call(argv)
    if not argv or argv[0] not in COMMANDS:
        sys.stderr.write(f"ERROR: unknown command 'pct {argv[0] if argv else ''}'\n" + USAGE)
        return 255
    try:
        COMMANDS[argv[0]](argv[1:])
    except PctError as error:
        sys.stderr.write(f"{error}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
