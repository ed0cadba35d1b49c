#!/usr/bin/env python3
"""Stand-in for ``python3 -m sglang.launch_server`` (stdlib, optional setproctitle, Python >= 3.9).

The entry script: the command line of a simulated server is ``python3 .../sglang_sim.py --model-path ...`` (SGLang's
flags), ``sglang_sim.py --make-model DIR [--arch A] [--hybrid-mamba] [--shards N] [--weights-gib G]`` creates a
simulated model directory and ``sglang_sim.py --make-site DIR [--version V]`` a ``DIR/sglang-V.dist-info`` for
importlib.metadata. The simulator itself is the package beside it, sglang_simulator/ (its __init__ gives
the overview and the modules; settings.py the SGLANG_SIM_* environment, SGLANG_SIM_VERSION included; flags.py the
flag tables; faults.py the SGLANG_SIM_FAULT table).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sglang_simulator.launch import main

if __name__ == "__main__":
    sys.exit(main())
