#!/usr/bin/env python3
"""Proxmox LXC test rig: makes this machine look like a Proxmox node for proxmox_pct_remote.

The rig provides what ``community.proxmox.proxmox_pct_remote`` talks to on a real node:
  - real LXC system containers named by numeric vmid (Debian bookworm, loopback-only network unless
    ``--network``), overlay snapshots of a cached base container that survives ``down`` (``purge`` removes it);
  - with ``--network``, a bridge of its own (gpuopsrig0, no address on this machine) and a veth per container on
    a small private subnet (10.213.0.0/24), so containers reach each other and nothing else (multi-node groups);
  - an sshd of its own on 127.0.0.1:<port> (config, host key, client key and authorized_keys
    under the work dir; the system sshd and /root/.ssh are untouched);
  - a ``pct`` stand-in at /usr/sbin/pct (tests/rig/pct.py) that logs every call;
  - inside each container the GPU host simulator: tests/simulator copied to /opt/gpuops-sim,
    fake GPUs in /var/lib/fake-gpu with ``nvidia-smi`` on PATH, fake model directories, and SGLang "installed":
    a dist-info of the simulator's default version (the newest) in python3's system site, so the collection reads
    that version as the container's SGLang and the simulator runs it; a site per simulated version under
    /opt/gpuops-sim/sglang-sites/<version> (inventory: gpuops_rig_sglang_sites) for a host that runs another one
    (its sglang_env puts that site first on PYTHONPATH).

CLI (root only; stdlib only so the system python3 can run it):
  rig.py setup                       install host packages, build the cached base container
  rig.py up --containers 200,201 [--gpus 8] [--port 2222] [--network] [--workdir DIR]
  rig.py status [--json]
  rig.py inventory [--output PATH]
  rig.py down [--keep] [--containers 200,201]
                                     --keep stops the containers but keeps them and the work dir;
                                     --containers takes only those down (the rig stays up for the others)
  rig.py purge                       down, then remove the base container and the rootfs cache

Only one rig can be up per machine: /usr/sbin/pct is machine-wide.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

RIG_DIR = Path(__file__).resolve().parent
SIMULATOR_DIR = RIG_DIR.parent / "simulator"
FLAG_TABLES = RIG_DIR.parent.parent / "plugins" / "plugin_utils" / "sglang_flag_tables.py"
DEFAULT_WORKDIR = Path("/var/tmp/gpuops-rig")
DEFAULT_PORT = 2222
LXC_PATH = Path("/var/lib/lxc")
BASE_NAME = "gpuops-rig-base"
# Present in the directory of every container the rig created; nothing else is ever destroyed.
OWNER_MARKER = "gpuops-rig-owned"
PCT_PATH = Path("/usr/sbin/pct")
PCT_MARKER = "gpuops-rig pct stand-in"
STATE_FILE = "rig.json"

RELEASE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
TEMPLATE_CACHE = Path("/var/cache/lxc/debian") / f"rootfs-{RELEASE}-amd64"
CONTAINER_PACKAGES = ("python3", "python3-setproctitle", "procps", "curl", "ca-certificates")
# Host command -> Debian package. lxc-templates, rsync and distro-info are only Recommends of lxc,
# but the debian template needs all three: it copies the rootfs with rsync and, without
# debian-distro-info, writes a wrong security suite so its package install fails silently.
HOST_REQUIREMENTS = {
    "/usr/bin/lxc-create": "lxc",
    "/usr/share/lxc/templates/lxc-debian": "lxc-templates",
    "/usr/sbin/debootstrap": "debootstrap",
    "/usr/bin/rsync": "rsync",
    "/usr/bin/debian-distro-info": "distro-info",
    "/usr/sbin/sshd": "openssh-server",
    "/usr/bin/ssh-keygen": "openssh-client",
}
CONTAINER_CONFIG = """\
# No bridge on the rig host: loopback only, like a CT whose network is irrelevant to the tests.
lxc.net.0.type = empty
lxc.apparmor.profile = unconfined
"""

# --network: the rig's own bridge, without an address on this machine, and one address per container.
BRIDGE = "gpuopsrig0"
SUBNET = "10.213.0"
NETWORK_MARK = "# gpuops-rig network"

SIM_DIR_IN_CT = "/opt/gpuops-sim"
FAKE_GPU_DIR_IN_CT = "/var/lib/fake-gpu"
# Debian's system site of /usr/bin/python3 (whatever its minor version): where SGLang is "installed" in a container.
SYSTEM_SITE_IN_CT = "/usr/lib/python3/dist-packages"
# A site per simulated version, <this>/<version>: on a host's PYTHONPATH, it comes before the system site's.
SGLANG_SITES_IN_CT = f"{SIM_DIR_IN_CT}/sglang-sites"
FAKE_MODELS_IN_CT = {
    "/models/fake-model": [],
    "/models/fake-model-hybrid": ["--arch", "Qwen3NextForCausalLM", "--hybrid-mamba"],
}


class RigError(Exception):
    pass


def run(argv, check=True, **kwargs):
    result = subprocess.run(argv, check=False, text=True, capture_output=True, **kwargs)
    if check and result.returncode != 0:
        raise RigError(f"{' '.join(argv)} failed (rc={result.returncode}):\n{result.stdout}{result.stderr}")
    return result


def log(message):
    print(message, file=sys.stderr, flush=True)


class Paths:
    """Everything the rig writes outside LXC's own directories lives under the work dir."""

    def __init__(self, workdir):
        self.workdir = Path(workdir)
        self.ssh = self.workdir / "ssh"
        self.host_key = self.ssh / "ssh_host_ed25519_key"
        self.client_key = self.ssh / "id_ed25519"
        self.authorized_keys = self.ssh / "authorized_keys"
        self.sshd_config = self.ssh / "sshd_config"
        self.sshd_pid = self.ssh / "sshd.pid"
        self.sshd_log = self.ssh / "sshd.log"
        self.call_log = self.workdir / "pct-calls.log"
        self.inventory = self.workdir / "inventory.yml"
        self.state = self.workdir / STATE_FILE


# --- host preparation ------------------------------------------------------------------------

def require_root():
    if os.geteuid() != 0:
        raise RigError("the rig needs root (LXC system containers, /usr/sbin/pct, sshd as root)")


def missing_host_packages():
    return sorted({package for path, package in HOST_REQUIREMENTS.items() if not os.path.exists(path)})


def unavailable_reason():
    """Why the rig cannot come up on this machine, or None (tests skip with this reason)."""
    if os.geteuid() != 0:
        return "the LXC rig needs root"
    missing = missing_host_packages()
    if missing:
        return f"host packages missing ({', '.join(missing)}): run tests/rig/rig.py setup"
    if not os.path.isdir("/sys/fs/cgroup") or not os.listdir("/sys/fs/cgroup"):
        return "no cgroup hierarchy mounted: LXC cannot start containers here"
    if PCT_PATH.exists():
        return f"{PCT_PATH} exists (a real Proxmox node, or a rig is already up): not touching it"
    return None


def install_host_packages():
    missing = missing_host_packages()
    if not missing:
        return
    log(f"installing host packages: {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update"], env=env)
    run(["apt-get", "install", "-y", "--no-install-recommends"] + missing, env=env)


def check_mirror(mirror):
    url = f"{mirror}/dists/{RELEASE}/Release"
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            response.read(64)
    except OSError as error:
        raise RigError(f"Debian mirror unreachable ({url}: {error}); pass a working one with --mirror") from error


def lxc_exists(name):
    return (LXC_PATH / str(name) / "config").is_file()


def lxc_state(name):
    result = run(["lxc-info", "-n", str(name), "-s", "-H"], check=False)
    return result.stdout.strip().lower() if result.returncode == 0 else "absent"


def owned(name):
    return (LXC_PATH / str(name) / OWNER_MARKER).is_file()


def mark_owned(name, **facts):
    (LXC_PATH / str(name) / OWNER_MARKER).write_text(json.dumps(facts) + "\n")


def ensure_base(mirror=DEFAULT_MIRROR, security_mirror=DEFAULT_SECURITY_MIRROR):
    """Build the base container once (~75 s the first time, ~15 s from the template's cache)."""
    if lxc_exists(BASE_NAME):
        if not owned(BASE_NAME):
            raise RigError(f"LXC container {BASE_NAME!r} exists but was not made by the rig")
        return
    check_mirror(mirror)
    cache_existed = TEMPLATE_CACHE.exists()
    config = Path(f"/tmp/{BASE_NAME}.conf")
    config.write_text(CONTAINER_CONFIG)
    log(f"creating base container {BASE_NAME} (Debian {RELEASE}; slow the first time)")
    try:
        run(["lxc-create", "-n", BASE_NAME, "-t", "debian", "-f", str(config), "--",
             "-r", RELEASE, "--mirror", mirror, "--security-mirror", security_mirror,
             "--packages=" + ",".join(CONTAINER_PACKAGES)])
    finally:
        config.unlink()
    rootfs = LXC_PATH / BASE_NAME / "rootfs"
    # The template exits 0 even when its apt-get install failed: check the result ourselves.
    if not (rootfs / "usr/bin/python3").exists() or not list(rootfs.glob("usr/lib/python3/dist-packages/setproctitle*")):
        run(["lxc-destroy", "-n", BASE_NAME], check=False)
        raise RigError(f"base container lacks {', '.join(CONTAINER_PACKAGES)}: the template's apt-get failed")
    # A CT reached through pct needs no sshd of its own; mask it so containers boot lighter.
    (rootfs / "etc/systemd/system/ssh.service").symlink_to("/dev/null")
    mark_owned(BASE_NAME, created_template_cache=not cache_existed)


def setup(mirror=DEFAULT_MIRROR, security_mirror=DEFAULT_SECURITY_MIRROR):
    require_root()
    install_host_packages()
    ensure_base(mirror, security_mirror)


# --- sshd ------------------------------------------------------------------------------------

def pid_of_our_sshd(paths):
    try:
        pid = int(paths.sshd_pid.read_text().split()[0])
        # sshd rewrites its title ("sshd: /usr/sbin/sshd -f <config> ... [listener]"): match a substring.
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return pid if str(paths.sshd_config).encode() in cmdline else None


def port_in_use(port):
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def ensure_keys(paths):
    paths.ssh.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.workdir, 0o700)
    for key in (paths.host_key, paths.client_key):
        if not key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuops-rig", "-f", str(key)])
    paths.authorized_keys.write_text(Path(f"{paths.client_key}.pub").read_text())
    paths.authorized_keys.chmod(0o600)


def start_sshd(paths, port):
    if pid_of_our_sshd(paths):
        return
    if port_in_use(port):
        raise RigError(f"127.0.0.1:{port} is taken by another process; choose --port")
    paths.sshd_config.write_text(f"""\
# sshd of the gpuops test rig: this machine plays the Proxmox node.
Port {port}
ListenAddress 127.0.0.1
HostKey {paths.host_key}
PidFile {paths.sshd_pid}
AuthorizedKeysFile {paths.authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# /var/tmp is world-writable, which StrictModes rejects on the way to authorized_keys.
StrictModes no
# pct logs its calls here (tests count round trips).
SetEnv GPUOPS_RIG_PCT_LOG={paths.call_log}
""")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
    run(["/usr/sbin/sshd", "-t", "-f", str(paths.sshd_config)])
    run(["/usr/sbin/sshd", "-f", str(paths.sshd_config), "-E", str(paths.sshd_log)])
    deadline = time.monotonic() + 10
    while not (pid_of_our_sshd(paths) and port_in_use(port)):
        if time.monotonic() > deadline:
            raise RigError(f"sshd did not come up on 127.0.0.1:{port}; see {paths.sshd_log}")
        time.sleep(0.1)


def stop_sshd(paths):
    pid = pid_of_our_sshd(paths)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


# --- pct stand-in ----------------------------------------------------------------------------

def pct_is_ours():
    try:
        return PCT_MARKER in PCT_PATH.read_text(errors="replace")[:400]
    except OSError:
        return False


def install_pct():
    if PCT_PATH.exists() and not pct_is_ours():
        raise RigError(f"{PCT_PATH} exists and is not the rig's stand-in (a real Proxmox node?): refusing to replace it")
    staging = PCT_PATH.with_name(".pct.gpuops-rig")
    shutil.copyfile(RIG_DIR / "pct.py", staging)
    staging.chmod(0o755)
    staging.replace(PCT_PATH)


def remove_pct():
    if pct_is_ours():
        PCT_PATH.unlink()


# --- containers ------------------------------------------------------------------------------

def attach(vmid, command, **kwargs):
    return run(["lxc-attach", "-n", str(vmid), "--clear-env", "--"] + command, **kwargs)


def ensure_bridge():
    """The rig's bridge, up; no address of this machine is on it, so only the containers talk over it."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    run(["ip", "link", "set", BRIDGE, "up"])


def remove_bridge():
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "delete", BRIDGE], check=False)


def container_address(vmid):
    """A container's address on the bridge, from its vmid alone: containers added to a running rig keep theirs."""
    return f"{SUBNET}.{10 + vmid % 240}"


def set_network(vmid, address):
    """The container's network: loopback only (address None), or a veth on the rig's bridge with ``address``.
    Returns True when its config changed (a running container must restart to get it)."""
    config = LXC_PATH / str(vmid) / "config"
    lines = config.read_text().splitlines()
    start = next((index for index, line in enumerate(lines) if line == NETWORK_MARK), None)
    kept = [line for line in (lines if start is None else lines[:start]) if not line.startswith("lxc.net.")]
    network = ["lxc.net.0.type = empty"] if address is None else [
        "lxc.net.0.type = veth", f"lxc.net.0.link = {BRIDGE}", "lxc.net.0.flags = up", "lxc.net.0.name = eth0",
        f"lxc.net.0.ipv4.address = {address}/24"]
    text = "\n".join(kept + [NETWORK_MARK] + network) + "\n"
    if config.read_text() == text:
        return False
    config.write_text(text)
    return True


def clone(vmid):
    """A copy-on-write snapshot of the base container (an overlay on its rootfs: instant, nothing copied); a full
    copy of the rootfs (about 6 s) where this kernel or LXC cannot mount an overlay."""
    snapshot = run(["lxc-copy", "-n", BASE_NAME, "-N", str(vmid), "-s", "-B", "overlay"], check=False)
    if snapshot.returncode == 0:
        return
    log(f"no overlay snapshot of {BASE_NAME} ({snapshot.stderr.strip()[-200:]}): copying its rootfs for {vmid}")
    run(["lxc-destroy", "-n", str(vmid)], check=False)
    run(["lxc-copy", "-n", BASE_NAME, "-N", str(vmid)])


def ensure_container(vmid, address=None):
    if lxc_exists(vmid):
        if not owned(vmid):
            raise RigError(f"container {vmid} exists and was not made by the rig; pick other --containers")
    else:
        clone(vmid)
        mark_owned(vmid)
    if set_network(vmid, address) and lxc_state(vmid) == "running":
        run(["lxc-stop", "-n", str(vmid)])
    if lxc_state(vmid) != "running":
        run(["lxc-start", "-n", str(vmid)])
        run(["lxc-wait", "-n", str(vmid), "-s", "RUNNING", "-t", "30"])
    # The container is attachable as soon as its init runs; give it a few seconds at most.
    deadline = time.monotonic() + 15
    while attach(vmid, ["/bin/true"], check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise RigError(f"cannot lxc-attach to container {vmid}")
        time.sleep(0.2)


def container_root(vmid):
    """The running container's root as its own processes see it, from this machine (whatever its storage: an overlay
    snapshot's files are not under /var/lib/lxc/<vmid>/rootfs on this side)."""
    result = run(["lxc-info", "-n", str(vmid), "-p", "-H"], check=False)
    if result.returncode != 0 or not result.stdout.strip().isdigit():
        raise RigError(f"container {vmid} is not running: {result.stdout.strip() or result.stderr.strip()}")
    return Path(f"/proc/{result.stdout.strip()}/root")


def install_simulator(vmid, gpus):
    """Copy tests/simulator into the CT (every `up`, so edits reach it) and (re)initialise fake GPUs."""
    if not (SIMULATOR_DIR / "fakegpu.py").is_file():
        raise RigError(f"{SIMULATOR_DIR}/fakegpu.py not found")
    target = container_root(vmid) / SIM_DIR_IN_CT.lstrip("/")
    shutil.rmtree(target, ignore_errors=True)  # a mirror: files deleted from the repo go too
    shutil.copytree(SIMULATOR_DIR, target,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "test_*.py", "conftest.py"))
    # The simulator parses SGLang's flags from the collection's generated tables; only its own directory is here.
    shutil.copyfile(FLAG_TABLES, target / FLAG_TABLES.name)
    install_sglang(container_root(vmid))
    # `init` creates or updates the state dir and keeps live allocations, so it is safe on re-`up`.
    attach(vmid, ["python3", f"{SIM_DIR_IN_CT}/fakegpu.py", "init", FAKE_GPU_DIR_IN_CT,
                  "--count", str(gpus), "--hide-compute-apps"])
    # /usr/bin is where the driver installs nvidia-smi and the only one of the two on the PATH that
    # `pct exec` gives commands (PVE's /sbin:/bin:/usr/sbin:/usr/bin, passed in by --keep-env 1).
    for link in ("/usr/local/bin/nvidia-smi", "/usr/bin/nvidia-smi"):
        attach(vmid, ["ln", "-sfn", f"{FAKE_GPU_DIR_IN_CT}/bin/nvidia-smi", link])
    make_fake_model(vmid)


def install_sglang(root):
    """The simulated SGLang of a container (``root``: its / seen from here): the default version's dist-info in
    python3's system site, and one site per simulated version under SGLANG_SITES_IN_CT."""
    if str(SIMULATOR_DIR) not in sys.path:
        sys.path.insert(0, str(SIMULATOR_DIR))
    from sglang_simulator.dist_info import write_site
    from sglang_simulator.settings import DEFAULT_VERSION, DIALECTS

    write_site(str(root / SYSTEM_SITE_IN_CT.lstrip("/")), DEFAULT_VERSION)
    for version in DIALECTS:
        write_site(str(root / SGLANG_SITES_IN_CT.lstrip("/") / version), version)


def make_fake_model(vmid):
    """Model directories made by the simulator's own maker (config.json + empty shards)."""
    for directory, maker_args in FAKE_MODELS_IN_CT.items():
        attach(vmid, ["python3", f"{SIM_DIR_IN_CT}/sglang_sim.py", "--make-model", directory] + maker_args)


def destroy_container(vmid, keep):
    if not lxc_exists(vmid) or not owned(vmid):
        return
    if lxc_state(vmid) == "running":
        run(["lxc-stop", "-n", str(vmid), "--kill"], check=False)
    if not keep:
        run(["lxc-destroy", "-n", str(vmid)])


# --- state and inventory ---------------------------------------------------------------------

def read_state(paths):
    try:
        return json.loads(paths.state.read_text())
    except (OSError, ValueError):
        return None


def write_inventory(paths, state, output=None):
    output = Path(output) if output else paths.inventory
    addresses = state.get("addresses") or {}
    hosts = "".join(f"        ct{vmid}:\n          proxmox_vmid: {vmid}\n"
                    + (f"          gpuops_rig_address: {addresses[str(vmid)]}\n" if str(vmid) in addresses else "")
                    for vmid in state["containers"])
    output.write_text(f"""\
# Written by tests/rig/rig.py: containers on this machine reached like Proxmox CTs.
all:
  children:
    rig:
      hosts:
{hosts}      vars:
        ansible_connection: community.proxmox.proxmox_pct_remote
        ansible_host: 127.0.0.1
        ansible_port: {state["port"]}
        ansible_user: root
        ansible_private_key_file: {paths.client_key}
        ansible_python_interpreter: /usr/bin/python3
        # The rig's host key is regenerated with every work dir.
        ansible_host_key_checking: false
        gpuops_rig_fake_gpu_dir: {FAKE_GPU_DIR_IN_CT}
        gpuops_rig_simulator_dir: {SIM_DIR_IN_CT}
        gpuops_rig_sglang_sites: {SGLANG_SITES_IN_CT}
        gpuops_rig_model_dirs: [{", ".join(FAKE_MODELS_IN_CT)}]
""")
    return output


def parse_vmids(text):
    vmids = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit() or not 100 <= int(item) <= 999999999:
            raise RigError(f"container ids are Proxmox vmids (integers >= 100), got {item!r}")
        vmids.append(int(item))
    return vmids


def up(containers, gpus=8, workdir=DEFAULT_WORKDIR, port=DEFAULT_PORT,
       mirror=DEFAULT_MIRROR, security_mirror=DEFAULT_SECURITY_MIRROR, network=False):
    """Bring the rig up (idempotent) and return its state dict; ``network``: the containers on the rig's bridge."""
    paths = Paths(workdir)
    setup(mirror, security_mirror)
    previous = read_state(paths)
    if previous and previous["port"] != port and pid_of_our_sshd(paths):
        raise RigError(f"the rig in {paths.workdir} is up on port {previous['port']}; run `down` first")
    ensure_keys(paths)
    install_pct()
    start_sshd(paths, port)
    state = {
        "workdir": str(paths.workdir),
        "port": port,
        "gpus": gpus,
        # Containers of an earlier `up` stay part of the rig until `down`.
        "containers": sorted(set(containers) | set(previous["containers"] if previous else [])),
        "private_key": str(paths.client_key),
        "call_log": str(paths.call_log),
        "inventory": str(paths.inventory),
    }
    # Addresses of the containers on the bridge: those of this call with --network, and earlier ones still on it.
    addresses = {vmid: address for vmid, address in ((previous or {}).get("addresses") or {}).items()
                 if int(vmid) in state["containers"] and int(vmid) not in containers}
    if network:
        ensure_bridge()
        addresses.update({str(vmid): container_address(vmid) for vmid in containers})
        shared = sorted({address for address in addresses.values() if list(addresses.values()).count(address) > 1})
        if shared:
            raise RigError(f"containers {sorted(addresses)} would share {shared} on the bridge "
                           "(the address is 10 + vmid % 240): pick vmids that differ by other than 240")
    if addresses:
        state["addresses"] = addresses
    paths.state.write_text(json.dumps(state, indent=2) + "\n")
    for vmid in containers:
        ensure_container(vmid, (state.get("addresses") or {}).get(str(vmid)))
        install_simulator(vmid, gpus)
    write_inventory(paths, state)
    return state


def down(workdir=DEFAULT_WORKDIR, keep=False, containers=None):
    """Take the rig down; with ``containers``, only those containers (the rig stays up for the others)."""
    paths = Paths(workdir)
    state = read_state(paths) or {"containers": []}
    if containers is not None:
        for vmid in containers:
            destroy_container(vmid, keep)
        if state.get("port") is not None:
            state["containers"] = [vmid for vmid in state["containers"] if vmid not in containers]
            if "addresses" in state:
                state["addresses"] = {vmid: address for vmid, address in state["addresses"].items()
                                      if int(vmid) not in containers}
            paths.state.write_text(json.dumps(state, indent=2) + "\n")
            write_inventory(paths, state)
        return
    try:
        for vmid in state["containers"]:
            destroy_container(vmid, keep)
    finally:
        # Whatever a container did: a pct stand-in left behind would make every later rig test skip.
        remove_bridge()  # also one an earlier `up --network` left when a later `up` went without it
        stop_sshd(paths)
        remove_pct()
        if not keep:
            shutil.rmtree(paths.workdir, ignore_errors=True)


def purge(workdir=DEFAULT_WORKDIR):
    down(workdir)
    # LXC keeps the base while snapshots of it exist: any the rig made (another work dir's, a bench's) go first.
    for config in sorted(LXC_PATH.glob("*/config")) if LXC_PATH.is_dir() else []:
        name = config.parent.name
        if name != BASE_NAME and owned(name):
            destroy_container(name, keep=False)
    if lxc_exists(BASE_NAME) and owned(BASE_NAME):
        facts = json.loads((LXC_PATH / BASE_NAME / OWNER_MARKER).read_text() or "{}")
        run(["lxc-destroy", "-n", BASE_NAME])
        if facts.get("created_template_cache"):
            shutil.rmtree(TEMPLATE_CACHE, ignore_errors=True)


def status(workdir=DEFAULT_WORKDIR):
    paths = Paths(workdir)
    state = read_state(paths) or {}
    calls = paths.call_log.read_text().count("\n") if paths.call_log.exists() else 0
    return {
        "workdir": str(paths.workdir),
        "up": bool(state) and pid_of_our_sshd(paths) is not None,
        "sshd_pid": pid_of_our_sshd(paths),
        "port": state.get("port"),
        "pct_stand_in_installed": pct_is_ours(),
        "containers": {str(vmid): lxc_state(vmid) for vmid in state.get("containers", [])},
        "base_cached": lxc_exists(BASE_NAME),
        "pct_calls_logged": calls,
        "inventory": state.get("inventory"),
    }


def read_call_log(workdir=DEFAULT_WORKDIR):
    """The pct invocations logged so far: [{"time", "pid", "argv"}]."""
    path = Paths(workdir).call_log
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- CLI -------------------------------------------------------------------------------------

def print_facts(state):
    print(f"""\
proxmox node:   127.0.0.1:{state["port"]} (ssh user root, key {state["private_key"]})
containers:     {", ".join(f"{vmid} ({lxc_state(vmid)})" for vmid in state["containers"])}
inventory:      {state["inventory"]}
pct call log:   {state["call_log"]}
try:            ansible -i {state["inventory"]} all -m ansible.builtin.ping""")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--workdir", default=str(DEFAULT_WORKDIR))
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("setup", "up"):
        command = sub.add_parser(name)
        command.add_argument("--mirror", default=DEFAULT_MIRROR)
        command.add_argument("--security-mirror", default=DEFAULT_SECURITY_MIRROR)
        if name == "up":
            command.add_argument("--containers", required=True, help="comma-separated vmids, e.g. 200,201")
            command.add_argument("--gpus", type=int, default=8)
            command.add_argument("--port", type=int, default=DEFAULT_PORT)
            command.add_argument("--network", action="store_true",
                                 help=f"the containers on a bridge of the rig's own ({SUBNET}.0/24)")
    down_command = sub.add_parser("down")
    down_command.add_argument("--keep", action="store_true", help="stop the containers but keep them and the work dir")
    down_command.add_argument("--containers", help="only these vmids (comma-separated); the rig stays up")
    sub.add_parser("status").add_argument("--json", action="store_true")
    sub.add_parser("inventory").add_argument("--output", help="default: <workdir>/inventory.yml")
    sub.add_parser("purge")
    # --workdir is accepted after the subcommand too (`rig.py up --workdir DIR`).
    for command in sub.choices.values():
        command.add_argument("--workdir", default=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    try:
        if args.command == "setup":
            setup(args.mirror, args.security_mirror)
        elif args.command == "up":
            print_facts(up(parse_vmids(args.containers), args.gpus, args.workdir, args.port,
                           args.mirror, args.security_mirror, args.network))
        elif args.command == "down":
            require_root()
            down(args.workdir, args.keep, parse_vmids(args.containers) if args.containers else None)
        elif args.command == "purge":
            require_root()
            purge(args.workdir)
        elif args.command == "status":
            facts = status(args.workdir)
            if args.json:
                print(json.dumps(facts, indent=2))
            else:
                print("\n".join(f"{key}: {value}" for key, value in facts.items()))
        elif args.command == "inventory":
            paths = Paths(args.workdir)
            state = read_state(paths)
            if state is None:
                raise RigError(f"no rig in {paths.workdir}; run `rig.py up` first")
            print(write_inventory(paths, state, args.output))
    except RigError as error:
        print(f"rig: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
