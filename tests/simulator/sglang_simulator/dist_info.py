"""``sglang_sim.py --make-site DIR [--version V]``: a ``DIR/sglang-V.dist-info`` (METADATA, INSTALLER, RECORD) so
that ``importlib.metadata.version("sglang")`` answers V in an interpreter whose sys.path holds DIR, as on a host
where SGLang is installed: version detection works on a simulated host. V defaults to the simulator's default
version (settings.DEFAULT_VERSION) and must be a supported one (or a post release of one)."""

import argparse
import os
import shutil

from .settings import DEFAULT_VERSION, DIALECTS, release_of

INSTALLER = "gpuops-sglang-simulator\n"


def make_site(argv):
    parser = argparse.ArgumentParser(prog="sglang_sim.py --make-site",
                                     description="write a dist-info of the simulated sglang")
    parser.add_argument("--make-site", dest="directory", required=True)
    parser.add_argument("--version", default=DEFAULT_VERSION)
    args = parser.parse_args(argv)
    if release_of(args.version) is None:
        parser.error(f"--version must be one of {', '.join(DIALECTS)} (or a post release of one), "
                     f"not {args.version!r}")
    os.makedirs(args.directory, exist_ok=True)
    for entry in os.listdir(args.directory):  # one version at a time: drop the simulator's earlier dist-infos
        installer = os.path.join(args.directory, entry, "INSTALLER")
        if entry.startswith("sglang-") and entry.endswith(".dist-info") and os.path.isfile(installer):
            with open(installer) as handle:
                if handle.read() == INSTALLER:
                    shutil.rmtree(os.path.join(args.directory, entry))
    dist_info = os.path.join(args.directory, f"sglang-{args.version}.dist-info")
    os.makedirs(dist_info)
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: sglang\nVersion: {args.version}\n"
                    "Summary: gpuops.sglang's SGLang simulator (tests/simulator/sglang_sim.py), not SGLang\n",
        "INSTALLER": INSTALLER,
    }
    for name, text in files.items():
        with open(os.path.join(dist_info, name), "w") as handle:
            handle.write(text)
    record = [f"sglang-{args.version}.dist-info/{name},," for name in (*files, "RECORD")]
    with open(os.path.join(dist_info, "RECORD"), "w") as handle:
        handle.write("\n".join(record) + "\n")
    return 0
