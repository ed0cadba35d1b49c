"""The entry point behind ``sglang_sim.py``: ``--make-model`` creates a model directory, anything else launches a
server with SGLang's flags."""

import sys

from .config import (
    ServerConfig,
    build_parser,
    check_server_args,
    make_model,
    read_model_config,
)
from .server import Server
from .settings import Sim


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--make-model" in argv:
        return make_model(argv)
    sim = Sim()
    args = build_parser(sim).parse_args(argv)
    sim.select_node(args.node_rank)
    check_server_args(args)
    config = ServerConfig(args, sim)
    # The main process reads config.json too (TokenizerManager); a missing model fails in the schedulers.
    try:
        model = read_model_config(args.model_path)
    except OSError:
        model = {}
    Server(config, model).run()
    return 0
