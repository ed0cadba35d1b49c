"""The entry point behind ``sglang_sim.py``: ``--make-model`` creates a model directory, ``--make-site`` a
dist-info that makes ``importlib.metadata`` see sglang, anything else launches a server with the simulated
version's flags (flags.py)."""

import sys

from .config import (
    ServerConfig,
    check_server_args,
    make_model,
    read_model_config,
    resolve_mamba_strategy,
)
from .dist_info import make_site
from .flags import build_parser
from .server import Server
from .settings import Sim


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--make-model" in argv:
        return make_model(argv)
    if "--make-site" in argv:
        return make_site(argv)
    sim = Sim()
    parser = build_parser(sim.release)
    args = parser.parse_args(argv)
    sim.select_node(args.node_rank)
    check_server_args(args)
    # The main process reads config.json too (TokenizerManager); a missing model fails in the schedulers.
    try:
        model = read_model_config(args.model_path)
    except OSError:
        model = {}
    resolve_mamba_strategy(args, model)
    config = ServerConfig(args, sim, parser.own_dests)
    Server(config, model).run()
    return 0
