# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A server's flags against the parser of the SGLang version that will run them, before anything is touched.

SGLang parses its command line with argparse (prefix matching on), so what its parser would refuse is known from
the option table of that version (sglang_flag_tables.py, generated from the versions' own parsers): an unknown
option, an abbreviation of several (``--cuda-graph-max-bs`` in 0.5.23), a value outside the choices, a missing or
extra value, a retired flag. Each problem is one sentence naming the flag and what would be right. Deprecated
flags the version still accepts are warnings.
"""

from __future__ import annotations

import difflib
import re

from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import (
    REDACTED,
    credential_name,
)

# Flags whose successor has another name; argparse cannot say it (the old name is simply gone or ambiguous).
# From the SGLang release notes (../shared/reference/sglang-today.md), checked against the generated tables by
# tests/unit/plugins/plugin_utils/test_flag_check.py: the old name is in an older table, the new ones in a newer.
RENAMED = {
    "--mamba-scheduler-strategy": ("--mamba-radix-cache-strategy",),
    "--cuda-graph-max-bs": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"),
    "--cuda-graph-bs": ("--cuda-graph-bs-decode", "--cuda-graph-bs-prefill"),
}
# What argparse takes for an option rather than a value ("-1" and "-0.5" stay values).
_LOOKS_LIKE_FLAG = re.compile(r"-[A-Za-z-]")


def _tables():
    # 90 KB of tables: imported only when a check runs.
    from ansible_collections.gpuops.sglang.plugins.plugin_utils.sglang_flag_tables import (  # pylint: disable=import-outside-toplevel
        OPTIONS,
    )
    return OPTIONS


def table_version(version):
    """The table key of a version (``0.5.10.post1`` and ``v0.5.10`` -> ``0.5.10``), or None when there is none."""
    numbers = re.findall(r"\d+", str(version or "").lstrip("vV").split("post", maxsplit=1)[0])[:3]
    key = ".".join(numbers)
    return key if key in _tables() else None


def known_versions():
    return sorted(_tables(), key=lambda version: tuple(int(part) for part in version.split(".")))


def _resolve(options, given):
    """(option string, None) for ``given`` or a unique abbreviation of it, else (None, problem)."""
    if given in options:
        return given, None
    matches = sorted(option for option in options if option.startswith(given))
    renamed = RENAMED.get(given)
    rename_hint = f"; it was renamed: use {' or '.join(renamed)}" if renamed else ""
    if len(matches) > 1:
        return None, (f"{given} is ambiguous (an abbreviation of {', '.join(matches[:6])}"
                      f"{', ...' if len(matches) > 6 else ''}){rename_hint or '; spell the option out'}")
    if len(matches) == 1:
        return matches[0], None
    if renamed:
        return None, f"{given} does not exist{rename_hint}"
    nearest = difflib.get_close_matches(given, list(options), n=3, cutoff=0.75)
    hint = f"; did you mean {' or '.join(nearest)}?" if nearest else ""
    return None, f"{given} is not an option{hint}"


def shown(option, value):
    """A value as a message may show it: a credential's never."""
    return REDACTED if credential_name(option) else repr(value)


def _values_problem(option, entry, values):
    arity, choices, _deprecation = entry
    count = len(values)
    wanted = {"flag": (0, 0), "value": (1, 1), "values": (1, None), "any": (0, None), "optional": (0, 1)}[arity]
    if count < wanted[0]:
        return f"{option} needs a value" + (f" (one of {', '.join(choices)})" if choices else "")
    if wanted[1] is not None and count > wanted[1]:
        extra = values[wanted[1]:]
        return (f"{option} takes {'no value' if wanted[1] == 0 else 'one value'}; "
                f"{' '.join(shown(option, value) for value in extra)} would be left over")
    bad = [value for value in values if choices and value not in choices]
    if bad:
        return f"{option} {shown(option, bad[0])} is not a valid choice; use one of {', '.join(choices)}"
    return None


def _split(flags):
    """[(option as written, [values])] from argv-style flags; values hidden behind ``=`` count as one."""
    split, current = [], None
    for token in flags:
        if " " in token and token.startswith("-"):
            # argparse takes a word with a space for a value, never for an option ("--port 1" as an API key).
            if current is None:
                split.append((token, []))
            else:
                current[1].append(token)
        elif token.startswith("--") and len(token) > 2:
            name, equals, value = token.partition("=")
            split.append((name, [value] if equals else []))
            # argparse takes the value after "=" alone: a word after it is left over, as a positional.
            current = None if equals else split[-1]
        elif current is None or _LOOKS_LIKE_FLAG.match(token):
            split.append((token, []))
            current = None
        else:
            current[1].append(token)
    return split


def check_flags(flags, version):
    """(problems, warnings) of ``flags`` (argv after the command) for SGLang ``version`` (a table key)."""
    options = _tables()[version]
    problems, warnings = [], []
    after_credential = False
    for given, values in _split(flags):
        # A word right after a credential flag is its value gone astray (a key that starts with "-"): never shown.
        shown_as = REDACTED if after_credential else None
        after_credential = not shown_as and given.startswith("--") and credential_name(given) and not values
        if not given.startswith("--"):
            problems.append(f"{shown_as or repr(given)} is not an option (SGLang takes no positional arguments)")
            continue
        if shown_as:
            problems.append(f"SGLang {version}: the value of the credential flag before it looks like an option")
            continue
        option, problem = _resolve(options, given)
        if problem:
            problems.append(f"SGLang {version}: {problem}")
            continue
        problem = _values_problem(option, options[option], values)
        if problem:
            problems.append(f"SGLang {version}: {problem}")
        deprecation = options[option][2]
        if deprecation and deprecation[0] == "fails":
            problems.append(f"SGLang {version}: {option} is retired: {deprecation[1]}")
        elif deprecation:
            instead = f"; use {deprecation[1]}" if deprecation[1] else ""
            warnings.append(f"SGLang {version}: {option} is deprecated{instead}")
        if option != given:
            warnings.append(f"SGLang {version}: {given} abbreviates {option}; spell it out (an abbreviation can "
                            "become ambiguous in a later version)")
    return problems, warnings
