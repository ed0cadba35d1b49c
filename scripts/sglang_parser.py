"""SGLang's own command-line parser, from an sglang installed without its dependencies.

    python3 -I scripts/sglang_parser.py SITE dump OUT.json  every option of ServerArgs.add_cli_args, as JSON
    python3 -I scripts/sglang_parser.py SITE parse ARG...   parse ARG... as ``sglang serve`` would (exit 2 with argparse's words)

SITE is a directory holding the ``sglang`` package (an unpacked wheel, or a site-packages where
``pip install --no-deps sglang==X`` put it), or several joined with ``:``. Importing ``sglang.srt.server_args`` pulls in torch, transformers and
friends, which are gigabytes and need a GPU: they are replaced by inert stand-ins (any attribute, call, subscript or
base class works and is falsy), so only sglang's own code - the parser included - runs for real. msgspec and dill do
real work at import time (0.5.23 builds its arguments from msgspec structs): they must be importable for real
(``scripts/sglang_flag_tables.py`` installs them next to the wheel). Run with ``python3 -I`` so that nothing else
from the caller's environment leaks in; SGLANG_USE_CPU_ENGINE=1 keeps 0.5.23 from probing for a GPU platform.
"""

import abc
import argparse
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types

# Imported for real when present on sys.path; everything else outside the stdlib and sglang is a stand-in.
REAL_DEPENDENCIES = {"msgspec", "dill"}
# Attributes a stand-in does not have: sglang takes hasattr(torch, "npu") for "this is an NPU build".
ABSENT = {"npu", "hpu", "xpu", "musa", "mlu"}
# Protocol attributes Python looks up optionally: a stand-in must say it has none of them.
OPTIONAL_DUNDERS = {
    "__set_name__", "__class_getitem__", "__mro_entries__", "__instancecheck__", "__subclasscheck__", "__origin__",
    "__parameters__", "__args__", "__wrapped__", "__signature__", "__get__", "__set__", "__delete__", "__fspath__",
    "__getstate__", "__reduce_ex__", "__copy__", "__deepcopy__", "__len__", "__iter__", "__next__", "__enter__",
    "__exit__", "__await__", "__aiter__", "__index__", "__call__",
}
# torch.__version__ and the like are parsed as versions at import time.
STAND_IN_VERSION = "2.9.0"


class _StandInClass(abc.ABCMeta):
    def __getattr__(cls, name):
        if name in OPTIONAL_DUNDERS:
            raise AttributeError(name)
        return StandIn(name)


class _StandInBase(metaclass=_StandInClass):
    """What a class that derives from a stand-in (``class X(nn.Module)``) derives from."""

    def __init_subclass__(cls, **kwargs):
        pass

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name in OPTIONAL_DUNDERS:
            raise AttributeError(name)
        return StandIn(name)


class StandIn(str):
    """Any attribute of a replaced module: callable, subscriptable, a decorator, a base class; falsy.

    A str so that it can be an attribute name (``getattr(torch, device)``) and a dict key."""

    def __getattr__(self, name):
        if name == "__version__":
            return STAND_IN_VERSION
        if name in OPTIONAL_DUNDERS or name in ABSENT:
            raise AttributeError(name)
        return StandIn(name)

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], StandIn):
            return args[0]  # used as a decorator
        return StandIn(str(self) + "()")

    def __mro_entries__(self, bases):
        return (_StandInBase,)

    def __getitem__(self, item):
        return self

    def __setitem__(self, key, value):
        pass

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __bool__(self):
        return False

    def __int__(self):
        return 0

    def __float__(self):
        return 0.0

    def __index__(self):
        return 0

    def __lt__(self, other):
        return False

    __gt__ = __lt__

    def __le__(self, other):
        return True

    __ge__ = __le__

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)

    def __contains__(self, item):
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


class _StandInModule(types.ModuleType):
    def __getattr__(self, name):
        if name == "__version__":
            return STAND_IN_VERSION
        if name in ABSENT or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return StandIn(name)


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top == "sglang" or top in sys.stdlib_module_names or top in REAL_DEPENDENCIES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _StandInModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def sglang_parser(site):
    sys.path[:0] = site.split(os.pathsep)
    sys.meta_path.insert(0, _StandInFinder())
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    from sglang.srt.server_args import ServerArgs  # pylint: disable=import-error,import-outside-toplevel

    # As sglang's prepare_server_args builds it (argparse's defaults: prefix matching on).
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def choices(action):
    """The option's choices as text, in their order - sorted where they are a set (whose order changes per run)."""
    if not action.choices:
        return None
    found = [str(choice) for choice in action.choices]
    return sorted(found) if isinstance(action.choices, (set, frozenset)) else found


def describe(action):
    """One option of the parser: what sglang_flag_tables.py keeps of it."""
    return {
        "options": list(action.option_strings),
        "nargs": action.nargs,
        "choices": choices(action),
        "action": type(action).__name__,
        # The Deprecated*Action classes of sglang name the replacement, or the error they raise.
        "new_flag": getattr(action, "new_flag", None),
        "error_message": getattr(action, "error_message", None),
        "help": str(action.help or ""),
    }


def main(argv):
    if len(argv) < 2 or argv[1] not in ("dump", "parse"):
        sys.exit(__doc__)
    parser = sglang_parser(argv[0])
    if argv[1] == "dump":
        options = [describe(action) for action in parser._actions if action.option_strings]  # pylint: disable=protected-access
        with open(argv[2], "w", encoding="utf-8") as out:
            json.dump(options, out)
        return
    parser.parse_args(argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
