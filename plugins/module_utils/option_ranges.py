# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documented ranges of every numeric option, checked before any process is touched.

Argument specs check types, not ranges: a negative stall timeout once passed them and the wait
killed a healthy fleet. Each module keeps its table next to its argument spec; the roles check
their variables against the same tables (plugin_utils may import this file, it is stdlib only).
"""

import collections
import math
import re

# ``off``: a value (0) that disables the option, allowed besides low..high.
# ``exclusive``: low and high themselves are refused (a memory fraction of 0 or 1 makes no sense).
# ``integer``: a fractional value is refused (a count, a port).
Range = collections.namedtuple("Range", ["low", "high", "unit", "off", "exclusive", "integer"],
                               defaults=(False, False))


def seconds(low, high, off=None):
    return Range(low, high, "s", off)


def count(low, high, off=None, unit=""):
    return Range(low, high, unit, off, integer=True)


def fraction(low, high):
    """A ratio strictly between low and high."""
    return Range(low, high, "", None, exclusive=True)


def percent():
    """0-100 %, both included."""
    return Range(0, 100, "%", None)


# Options several modules share take the same range.
PROGRESS_INTERVAL = seconds(0.1, 600)
LOCK_TIMEOUT = seconds(0, 86400)


def _number(value):
    """1048576 rather than :g's 1.04858e+06; 0.5 as it is."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def describe(option_range):
    unit = f" {option_range.unit}" if option_range.unit else ""
    text = f"{_number(option_range.low)}-{_number(option_range.high)}{unit}"
    if option_range.exclusive:
        text += " (exclusive)"
    if option_range.off is not None:
        text += f", or {_number(option_range.off)} to turn it off"
    return text


def kind(value):
    """The YAML kind of ``value`` for messages (Ansible hands over its own subclasses of dict, list and str)."""
    for python_type, name in ((bool, "boolean"), (dict, "dict"), ((list, tuple), "list"), (str, "string"),
                              ((int, float), "number")):
        if isinstance(value, python_type):
            return name
    return "null" if value is None else type(value).__name__


def range_problem(name, value, option_range):
    """The message for ``name=value`` outside ``option_range``, or None when it is inside."""
    # bool is an int to Python, and NaN compares false with every bound.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return f"{name} must be a number ({describe(option_range)}), got {value!r}"
    if option_range.integer and isinstance(value, float) and not value.is_integer():
        return f"{name} must be an integer ({describe(option_range)}), got {value!r}"
    if option_range.off is not None and value == option_range.off:
        return None
    if option_range.exclusive:
        inside = option_range.low < value < option_range.high
    else:
        inside = option_range.low <= value <= option_range.high
    if not inside:
        return f"{name}={_number(value)} is out of range: use {describe(option_range)}"
    return None


# A URL path as the HTTP options take it: a leading slash, then path characters only (no space, query or fragment).
_URL_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*")


def url_path_problem(name, value):
    """The message for a path option (a health path) that is no URL path, or None."""
    if isinstance(value, str) and _URL_PATH.fullmatch(value):
        return None
    return (f"{name} must be a URL path starting with '/' (e.g. /health_generate), without spaces, '?' or '#'; "
            f"got {value!r}")


# What a boolean role variable may hold: ``-e name=false`` hands over the string "false", which is truthy as it is.
BOOLEAN_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def boolean_problem(name, value):
    """The message for a value that is no boolean (true/false, yes/no, 1/0, also as strings), or None."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return None
    if isinstance(value, str) and value.strip().lower() in BOOLEAN_WORDS:
        return None
    return f"{name} must be true or false (also yes/no, 1/0), got {value!r}"


def as_boolean(value):
    """A value that passed boolean_problem as the bool it means."""
    if isinstance(value, str):
        return BOOLEAN_WORDS[value.strip().lower()]
    return bool(value)


def range_problems(values, ranges):
    """Messages for every ``values[name]`` outside ``ranges[name]`` (names missing from ``values`` are skipped)."""
    problems = []
    for name in sorted(ranges):
        if name in values and values[name] is not None:
            problem = range_problem(name, values[name], ranges[name])
            if problem:
                problems.append(problem)
    return problems
