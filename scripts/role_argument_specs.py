# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copy the shared settings of role gpuops.sglang.settings into the argument specs of the other roles.

ansible-doc documents a role from its own meta/argument_specs.yml only, so every entry point of
gpuops.sglang.launch_scripts and gpuops.sglang.relaunch lists the shared sglang_* options too. Their one
definition is roles/settings/meta/argument_specs.yml (entry point main); this script writes them, first and in
its order, into each entry point, and keeps each role's own options after them.

It also writes plugins/plugin_utils/role_variables.py: every sglang_*/relaunch_* name the roles and playbooks use
(options, defaults, facts, registered results), against which a variable a user sets is known or not.

    .venv/bin/python scripts/role_argument_specs.py           rewrite the specs that differ
    .venv/bin/python scripts/role_argument_specs.py --check   only list them (exit 1); a unit test checks this
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys

import yaml

REPO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ROLES_DIR = os.path.join(REPO_DIR, "roles")
VARIABLES_PATH = os.path.join(REPO_DIR, "plugins", "plugin_utils", "role_variables.py")
VARIABLE_NAME = re.compile(r"\b((?:sglang|relaunch)_[a-z0-9_]*[a-z0-9])\b")
SOURCE_ROLE = "settings"
HEADER = f"""---
# The sglang_* options of every entry point are copied from roles/{SOURCE_ROLE}/meta/argument_specs.yml by
# scripts/role_argument_specs.py (a unit test fails when they drift): edit them there, then run it.
"""


class _Dumper(yaml.SafeDumper):
    """Block style with indented lists, like the rest of the collection's YAML; an option that several entry points
    share is written once, anchored with its name (``option_names``: object id -> name), and aliased by the others."""

    def __init__(self, stream, option_names, **options):
        super().__init__(stream, **options)
        self.option_names = option_names

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)

    def generate_anchor(self, node):
        for object_id, represented in self.represented_objects.items():
            if represented is node and object_id in self.option_names:
                return self.option_names[object_id]
        return super().generate_anchor(node)


def spec_path(role):
    return os.path.join(ROLES_DIR, role, "meta", "argument_specs.yml")


def load_specs(role):
    with open(spec_path(role)) as handle:
        return yaml.safe_load(handle)["argument_specs"]


def shared_options():
    """The shared settings: the options of the settings role's main entry point."""
    return load_specs(SOURCE_ROLE)["main"]["options"]


def target_roles():
    """The roles whose argument specs carry the shared settings: every role but the settings role."""
    return sorted(role for role in os.listdir(ROLES_DIR)
                  if role != SOURCE_ROLE and os.path.isfile(spec_path(role)))


def with_shared_options(specs, shared):
    """``specs`` with every entry point's options = the shared ones, then the entry point's own ones.

    An own option equal to one of an earlier entry point becomes that same object, so it is written once.
    """
    result, seen = {}, {}
    for entry_point, spec in specs.items():
        own = {}
        for name, option in spec.get("options", {}).items():
            if name not in shared:
                own[name] = seen[name] if seen.get(name) == option else seen.setdefault(name, option)
        described = {key: value for key, value in spec.items() if key != "options"}
        result[entry_point] = dict(described, options={**shared, **own})
    return result


def render(specs):
    names = {id(option): name for spec in specs.values() for name, option in spec["options"].items()}
    stream = io.StringIO()
    dumper = _Dumper(stream, names, sort_keys=False, width=118, allow_unicode=True)
    try:
        dumper.open()
        dumper.represent({"argument_specs": specs})
        dumper.close()
    finally:
        dumper.dispose()
    return HEADER + stream.getvalue()


def variable_names():
    """Every sglang_*/relaunch_* name in the roles' and playbooks' YAML and templates."""
    names = set()
    for top in (ROLES_DIR, os.path.join(REPO_DIR, "playbooks")):
        for directory, _dirs, files in os.walk(top):
            for name in files:
                if name.endswith((".yml", ".yaml", ".j2")):
                    with open(os.path.join(directory, name)) as handle:
                        names.update(VARIABLE_NAME.findall(handle.read()))
    return sorted(names)


def render_variables(names):
    lines = "".join(f"    {name!r},\n" for name in names)
    return ('# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)\n'
            '"""Every sglang_*/relaunch_* name the roles and playbooks use - options, defaults, facts, registered\n'
            'results - written by scripts/role_argument_specs.py (a unit test fails when it drifts). A variable a\n'
            'user sets with one of these prefixes and not in this set does nothing (role_options.unknown_variables)."""\n'
            f"\nKNOWN_VARIABLES = frozenset((\n{lines}))\n")


def drifted():
    """{path: wanted text} of every role spec that differs from what the shared settings make of it, and of the
    known variable names."""
    shared = shared_options()
    wanted = {spec_path(role): render(with_shared_options(load_specs(role), shared)) for role in target_roles()}
    wanted[VARIABLES_PATH] = render_variables(variable_names())
    changed = {}
    for path, text in wanted.items():
        if not os.path.exists(path):
            changed[path] = text
            continue
        with open(path) as handle:
            if handle.read() != text:
                changed[path] = text
    return changed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list the specs that differ instead of writing them")
    args = parser.parse_args(argv)
    changed = drifted()
    for path, text in changed.items():
        print(os.path.relpath(path))
        if not args.check:
            with open(path, "w") as handle:
                handle.write(text)
    return 1 if changed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
