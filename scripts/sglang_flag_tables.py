"""Generate plugins/plugin_utils/sglang_flag_tables.py from each SGLang version's own parser.

    python3 scripts/sglang_flag_tables.py [VERSION ...]     (default: the versions the table holds now)

For each version: ``pip download --no-deps sglang==VERSION``, unpack the wheel (with msgspec and dill beside it,
which sglang's parser needs for real), and list every option of ``ServerArgs.add_cli_args`` through
scripts/sglang_parser.py. Wheels and unpacked trees are cached under .work/sglang-versions/. Re-run it when a
version is added; the output is checked in and tests/integration/test_sglang_versions.py regenerates one version
to prove it matches.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(REPO, ".work", "sglang-versions")
TABLES = os.path.join(REPO, "plugins", "plugin_utils", "sglang_flag_tables.py")
PARSER = os.path.join(REPO, "scripts", "sglang_parser.py")
DEFAULT_VERSIONS = ("0.5.9", "0.5.10.post1", "0.5.23")
# What sglang's parser needs at import time beyond the stdlib (scripts/sglang_parser.py stands in for the rest).
PARSER_DEPENDENCIES = ("msgspec", "dill")

HEADER = '''# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every option of each supported SGLang version's ``sglang serve`` parser. GENERATED - do not edit.

Written by scripts/sglang_flag_tables.py from the versions' own ``ServerArgs.add_cli_args`` (their PyPI wheels).
``OPTIONS[version][option] = (arity, choices, deprecation)``: arity is ``flag`` (takes no value), ``value`` (one),
``values`` (one or more), ``any`` (zero or more) or ``optional`` (zero or one); choices is a tuple or None;
deprecation is None, ``("warns", new_flag_or_None)`` (accepted with a warning) or ``("fails", message)`` (the
parser refuses it, saying why).
"""

'''


def site_of(version):
    """The unpacked wheel of ``version`` with the parser's dependencies, downloaded once."""
    site = os.path.join(CACHE, version, "site")
    if os.path.isdir(os.path.join(site, "sglang")):
        return site
    wheels = os.path.join(CACHE, version, "wheels")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels, f"sglang=={version}"],
                   check=True)
    wheel = next(name for name in os.listdir(wheels) if name.startswith("sglang-") and name.endswith(".whl"))
    with zipfile.ZipFile(os.path.join(wheels, wheel)) as archive:
        archive.extractall(site)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site,
                    *PARSER_DEPENDENCIES], check=True)
    return site


def options_of(site, python=sys.executable):
    """The parser's options as scripts/sglang_parser.py dumps them, run by ``python`` (the one msgspec was built for)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as dump:
        subprocess.run([python, "-I", PARSER, site, "dump", dump.name], check=True,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SGLANG_USE_CPU_ENGINE": "1"})
        with open(dump.name, encoding="utf-8") as found:
            return json.load(found)


def arity(nargs):
    if nargs == 0:
        return "flag"
    if nargs is None or nargs == 1:
        return "value"
    return {"+": "values", "*": "any", "?": "optional"}.get(nargs, "values")


def deprecation(option):
    action = option["action"]
    if not action.startswith("Deprecated"):
        return None
    if option["error_message"]:
        return ("fails", option["error_message"])
    return ("warns", option["new_flag"])


def table(options):
    """option string -> (arity, choices, deprecation), for every option string of the parser."""
    entries = {}
    for option in options:
        entry = (arity(option["nargs"]), tuple(option["choices"]) if option["choices"] else None, deprecation(option))
        for string in option["options"]:
            if string.startswith("--"):
                entries[string] = entry
    return dict(sorted(entries.items()))


def short_version(version):
    """``0.5.10.post1`` -> ``0.5.10``: a post release keeps its release's flags."""
    return ".".join(version.split(".")[:3]).split("post", maxsplit=1)[0].rstrip(".")


def render(tables):
    """The module text: a line per option (wrapped where its choices are long), lines within 120 characters."""
    lines = ["OPTIONS = {"]
    for version, options in sorted(tables.items()):
        lines.append(f"    {version!r}: {{")
        for option, entry in options.items():
            line = f"        {option!r}: {entry!r},"
            if len(line) <= 120:
                lines.append(line)
                continue
            # A long list of choices: the entry spread over lines, the choices wrapped inside their parentheses.
            arity, choices, deprecation = entry
            lines += [f"        {option!r}: (", f"            {arity!r},"]
            lines += textwrap.wrap(", ".join(repr(choice) for choice in choices) + "),", width=120,
                                   initial_indent=" " * 12 + "(", subsequent_indent=" " * 13,
                                   break_long_words=False, break_on_hyphens=False)
            lines += [f"            {deprecation!r},", "        ),"]
        lines.append("    },")
    lines.append("}")
    return HEADER + "\n".join(lines) + "\n"


def main(versions):
    tables = {short_version(version): table(options_of(site_of(version))) for version in versions}
    with open(TABLES, "w", encoding="utf-8") as out:
        out.write(render(tables))
    for version, options in tables.items():
        print(f"{version}: {len(options)} option strings")


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT_VERSIONS)
