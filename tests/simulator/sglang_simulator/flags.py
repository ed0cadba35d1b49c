"""SGLang's command line for the simulated version (build_parser), made from the flag tables generated from the
real parsers (plugins/plugin_utils/sglang_flag_tables.py: ``OPTIONS[version][option] = (arity, choices,
deprecation)``), so the simulator accepts exactly the options of its version: an unknown option, an ambiguous
prefix (argparse's allow_abbrev, which SGLang keeps) or a bad choice exits 2 with argparse's own words.

Two layers: OWN_OPTIONS, the options the simulator reads, keep its own types, defaults, dests and aliases (an
alias the version's table lacks is left out, and an option it lacks altogether is not added); every other
option string of the table is added as is (its arity: flag, value, values, any or optional, and its choices),
parsed and ignored. Choices always come from the table. A ``("fails", message)`` deprecation refuses the option
with the table's message; a ``("warns", ...)`` one is accepted silently (the table does not keep the warning's
words).

The table is loaded by path (no ansible import): a copy ``sglang_flag_tables.py`` in the simulator's directory
(tests/simulator/, the only one copied into the LXC containers) wins, else the collection's own, found relative to
this file."""

import argparse
import importlib.util
import os
import sys

TABLES_FILE = "sglang_flag_tables.py"
SIM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/simulator
TABLE_PATHS = (os.path.join(SIM_DIR, TABLES_FILE),
               os.path.join(os.path.dirname(os.path.dirname(SIM_DIR)), "plugins", "plugin_utils", TABLES_FILE))

ARITY = {"flag": {"action": "store_true"}, "value": {}, "values": {"nargs": "+"}, "any": {"nargs": "*"},
         "optional": {"nargs": "?"}}

# (option strings, keyword arguments): the options the simulator reads, with the types, defaults and dests it
# reads them with. The first option string present in the version's table names the dest unless one is given.
OWN_OPTIONS = [
    (("--model-path", "--model"), {"dest": "model_path", "required": True}),
    (("--tokenizer-path",), {}),
    (("--host",), {"default": "127.0.0.1"}),
    (("--port",), {"type": int, "default": 30000}),
    (("--tp-size", "--tensor-parallel-size"), {"dest": "tp_size", "type": int, "default": 1}),
    (("--dp-size", "--data-parallel-size"), {"dest": "dp_size", "type": int, "default": 1}),
    (("--base-gpu-id",), {"type": int, "default": 0}),
    (("--gpu-id-step",), {"type": int, "default": 1}),
    (("--mem-fraction-static",), {"type": float}),
    (("--max-running-requests",), {"type": int}),
    (("--max-total-tokens",), {"type": int}),
    (("--chunked-prefill-size",), {"type": int}),
    (("--max-prefill-tokens",), {"type": int, "default": 16384}),
    (("--context-length",), {"type": int}),
    (("--enable-metrics",), {}),
    (("--decode-log-interval",), {"type": int, "default": 40}),
    (("--stream-interval",), {"type": int, "default": 1}),
    (("--api-key",), {}),
    (("--admin-api-key",), {}),
    (("--ssl-keyfile-password",), {}),
    (("--served-model-name",), {}),
    (("--log-level",), {"default": "info"}),
    (("--speculative-algorithm",), {}),
    (("--speculative-draft-model-path", "--speculative-draft-model"), {"dest": "speculative_draft_model_path"}),
    (("--speculative-num-steps",), {"type": int}),
    (("--speculative-eagle-topk",), {"type": int}),
    (("--speculative-num-draft-tokens",), {"type": int}),
    (("--mamba-scheduler-strategy",), {"default": "auto"}),  # up to 0.5.10
    (("--mamba-radix-cache-strategy",), {"default": "auto"}),  # 0.5.23
    (("--max-mamba-cache-size",), {"type": int}),
    (("--mamba-full-memory-ratio",), {"type": float, "default": 0.9}),
    (("--disable-radix-cache",), {}),
    (("--disable-overlap-schedule",), {}),
    (("--disable-cuda-graph",), {}),
    (("--cuda-graph-max-bs",), {"type": int}),  # up to 0.5.10
    (("--cuda-graph-max-bs-decode",), {"dest": "cuda_graph_max_bs", "type": int}),  # 0.5.23
    (("--trust-remote-code",), {}),
    (("--skip-server-warmup",), {}),
    (("--kv-cache-dtype",), {"default": "auto"}),
    (("--page-size",), {"type": int, "default": 1}),
    (("--attention-backend",), {}),
    (("--disable-custom-all-reduce",), {}),
    (("--enable-p2p-check",), {}),
    (("--watchdog-timeout",), {"type": float, "default": 300}),
    (("--dist-timeout",), {"type": int}),
    (("--nnodes",), {"type": int, "default": 1}),
    (("--node-rank",), {"type": int, "default": 0}),
    (("--dist-init-addr", "--nccl-init-addr"), {"dest": "dist_init_addr"}),
    (("--nccl-port",), {"type": int}),
]


def load_tables():
    """OPTIONS of sglang_flag_tables.py, loaded by path: the simulator directory's copy, else the collection's."""
    for path in TABLE_PATHS:
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("sglang_flag_tables", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.OPTIONS
    sys.exit(f"sglang_sim: no flag tables: none of {', '.join(TABLE_PATHS)} exists")


def refusing(message):
    """The action of an option whose deprecation is ``fails``: the parser refuses it with the table's message."""
    class Refused(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            parser.error(message)
    return Refused


def table_kwargs(entry):
    """add_argument's keywords for a table entry (arity, choices, deprecation)."""
    arity, choices, deprecation = entry
    kwargs = dict(ARITY[arity])
    if choices is not None:
        kwargs["choices"] = list(choices)
    if deprecation and deprecation[0] == "fails":
        kwargs = {"action": refusing(deprecation[1]), "nargs": 0 if arity == "flag" else kwargs.get("nargs")}
        if kwargs["nargs"] is None:
            del kwargs["nargs"]
    return kwargs


def build_parser(version, options=None):
    """The parser of ``launch_server`` for a supported release (settings.DIALECTS' keys)."""
    options = (load_tables() if options is None else options)[version]
    parser = argparse.ArgumentParser(prog="launch_server.py")  # allow_abbrev, as SGLang's
    own_strings = set()
    parser.own_dests = set()  # what ServerConfig shows as ServerArgs
    for strings, own in OWN_OPTIONS:
        present = [string for string in strings if string in options]
        if not present:
            continue
        own_strings.update(present)
        kwargs = table_kwargs(options[present[0]])
        if kwargs.get("action") == "store_true":
            kwargs.pop("choices", None)
        elif "type" in own and own["type"] is not str:
            kwargs.pop("choices", None)  # the table's choices are strings; none of the typed options has any
        kwargs.update(own)
        parser.own_dests.add(parser.add_argument(*present, **kwargs).dest)
    for string, entry in options.items():
        if string in own_strings or string in ("-h", "--help"):
            continue
        parser.add_argument(string, **table_kwargs(entry))
    return parser
