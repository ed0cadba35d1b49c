"""``sglang_sim.py --make-site DIR [--version V]``: a ``DIR/sglang-V.dist-info`` (METADATA, INSTALLER, RECORD) so
that ``importlib.metadata.version("sglang")`` answers V in an interpreter whose sys.path holds DIR, as on a host
where SGLang is installed: version detection works on a simulated host, and a simulated server started by that
interpreter simulates V (settings.simulated_version). V defaults to the simulator's default version
(settings.DEFAULT_VERSION) and must be a supported one (or a post release of one). ``write_site`` is the same for a
caller that imports the package (the integration tests' hosts, the LXC rig)."""

import argparse
import os
import shutil

from .settings import DEFAULT_VERSION, DIALECTS, release_of

INSTALLER = "gpuops-sglang-simulator\n"


def write_site(directory, version=DEFAULT_VERSION):
    """``directory/sglang-<version>.dist-info``, replacing a dist-info of the simulator's there; returns its path."""
    if release_of(version) is None:
        raise ValueError(f"version must be one of {', '.join(DIALECTS)} (or a post release of one), not {version!r}")
    os.makedirs(directory, exist_ok=True)
    for entry in os.listdir(directory):  # one version at a time: drop the simulator's earlier dist-infos
        installer = os.path.join(directory, entry, "INSTALLER")
        if entry.startswith("sglang-") and entry.endswith(".dist-info") and os.path.isfile(installer):
            with open(installer) as handle:
                if handle.read() == INSTALLER:
                    shutil.rmtree(os.path.join(directory, entry))
    dist_info = os.path.join(directory, f"sglang-{version}.dist-info")
    os.makedirs(dist_info)
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n"
                    "Summary: gpuops.sglang's SGLang simulator (tests/simulator/sglang_sim.py), not SGLang\n",
        "INSTALLER": INSTALLER,
    }
    for name, text in files.items():
        with open(os.path.join(dist_info, name), "w") as handle:
            handle.write(text)
    record = [f"sglang-{version}.dist-info/{name},," for name in (*files, "RECORD")]
    with open(os.path.join(dist_info, "RECORD"), "w") as handle:
        handle.write("\n".join(record) + "\n")
    return dist_info


def make_site(argv):
    parser = argparse.ArgumentParser(prog="sglang_sim.py --make-site",
                                     description="write a dist-info of the simulated sglang")
    parser.add_argument("--make-site", dest="directory", required=True)
    parser.add_argument("--version", default=DEFAULT_VERSION)
    args = parser.parse_args(argv)
    try:
        write_site(args.directory, args.version)
    except ValueError as error:
        parser.error(f"--{error}")
    return 0
