"""Give ansible-test a pip bootstrap script it would otherwise download from a host unreachable here.

ansible-test bootstraps pip into each sanity-test virtualenv with get-pip.py, fetched from
ci-files.testing.ansible.com and cached as ~/.ansible/test/cache/get_pip_<version>.py. The stand-in
written here bootstraps pip with the standard library's ensurepip and then installs the pinned pip
that ansible-test asked for (from PyPI, which is reachable).
"""

import pathlib
import re

import ansible_test

STAND_IN = '''\
"""get-pip.py stand-in written by gpuops.sglang (scripts/ansible_test_get_pip.py)."""
import ensurepip
import os
import ssl
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
# get-pip.py options that "pip install" does not know.
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
# ansible-test runs pip with a reduced environment (no PIP_CERT); ensurepip's older pip then does not trust
# a site CA that the system store has. The pinned pip installed here uses the system store (truststore).
paths = ssl.get_default_verify_paths()
cafile = next((p for p in (os.environ.get("SSL_CERT_FILE"), paths.cafile, paths.openssl_cafile)
               if p and os.path.exists(p)), None)
subprocess.check_call([sys.executable, "-m", "pip", "install", *(["--cert", cafile] if cafile else []), *args])
'''


def main():
    requirements = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    pip_version = re.search(r"pip='([^']+)'", requirements.read_text()).group(1)
    cache = pathlib.Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{pip_version.replace('.', '_')}.py"
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(STAND_IN)
    print(f"ansible-test pip {pip_version} bootstrap stand-in: {cache}")


if __name__ == "__main__":
    main()
