# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place where API keys are hidden from what the collection shows or stores.

Two ways in, because a key reaches us in two shapes:

- ``scrub_argv``: an argv list (``/proc/<pid>/cmdline``); exact per element, so a key holding any
  character (spaces, quotes, a newline) is hidden whole;
- ``scrub_text``: free text (log lines, messages, diffs of launch scripts, joined command lines): the
  known secret values, the value after a key flag (a shell word, quoted or not) and the key in SGLang's
  ``server_args`` dump (a Python string literal).

Stdlib only (runs on the GPU host); every pattern is linear in the length of the text.
"""

import re
import shlex

REDACTED = "********"
# SGLang's argparse accepts any unambiguous prefix of a flag: hide the value after "--api", "--api-k", ...
_KEY_FLAGS = (("--api-key", "--api"), ("--admin-api-key", "--admin"))
_KEY_FLAG_SPELLINGS = frozenset(
    flag[:length] for flag, shortest in _KEY_FLAGS for length in range(len(shortest), len(flag) + 1))

_FLAG_ALTERNATIVES = "|".join(re.escape(spelling) for spelling in sorted(_KEY_FLAG_SPELLINGS, key=len, reverse=True))
# One shell word: unquoted characters, '...' (no escapes inside), "..." (backslash escapes) and \x,
# a backslash-newline included (a line continuation). An unterminated quote runs to the end of the text.
_SHELL_WORD = r"""(?:[^\s'"\\]|'[^']*'?|"[^"\\]*(?:\\[\s\S][^"\\]*)*"?|\\[\s\S])+"""
# The quoted form a shell-quoted "--api-key=VALUE" argument has: '--api-key=VALUE' with shlex's '"'"' for a quote.
_QUOTED_ASSIGNMENT = r"""[^']*(?:'"'"'[^']*)*'?"""
# A value hidden already (a command line scrubbed at the source, then put in a message) stays as it is, and so
# does what follows it: scrubbing twice gives what scrubbing once gave.
_HIDDEN_ALREADY = re.escape(REDACTED) + r"""(?![^\s'"\\)\];,])"""
_KEY_FLAG_VALUE = re.compile(
    r"(?<![\w-])(?P<quote>')?(?P<flag>" + _FLAG_ALTERNATIVES + r")"
    r"(?P<separator>=|(?(quote)(?!)|(?:[ \t]|\\\n)+))"
    r"(?P<value>(?(quote)" + _QUOTED_ASSIGNMENT + "|(?:" + _HIDDEN_ALREADY + "|" + _SHELL_WORD + ")))")

# SGLang logs its ServerArgs: "api_key='...'" (classic), "'api_key': '...'" (new), also seen as JSON.
# repr() picks double quotes for a key holding a single quote, and escapes backslashes and newlines.
_PYTHON_STRING = r"""'[^'\\\n]*(?:\\.[^'\\\n]*)*'?|"[^"\\\n]*(?:\\.[^"\\\n]*)*"?"""
_SERVER_ARGS_KEY = re.compile(
    r"""(?<![\w'"])(?P<name>(?P<quote>['"]?)(?:admin_)?api_key(?P=quote)\s*[=:]\s*)"""
    r"""(?:(?P<string>""" + _PYTHON_STRING + r""")|(?!None\b)[^\s,)}'"]+)""")


def scrub_argv(argv):
    """A copy of ``argv`` with the value of every key flag (``--api-key V``, ``--api-key=V``, prefixes) hidden."""
    scrubbed, hide_next = [], False
    for arg in argv:
        if hide_next:
            scrubbed.append(REDACTED)
            hide_next = False
            continue
        flag, equals, _value = arg.partition("=")
        if flag in _KEY_FLAG_SPELLINGS:
            if equals:
                arg = flag + equals + REDACTED
            else:
                hide_next = True
        scrubbed.append(arg)
    return scrubbed


def _spellings(secret):
    """How ``secret`` appears in text: as is, shell-quoted (launch scripts) and inside a Python repr (logs)."""
    return {secret, shlex.quote(secret), repr(secret)[1:-1]}


def scrub_text(text, secrets=()):
    """``text`` with ``secrets`` and every API key value hidden; None stays None.

    Known values go first, longest first (a secret containing another is hidden whole). Then the value
    after a key flag and the key in SGLang's server_args dumps, even when nobody told us that key
    (the previous key of a rotation, shown in a diff's before side); ``api_key=None`` stays.
    """
    if text is None:
        return None
    for spelling in sorted({form for secret in secrets if secret for form in _spellings(secret)}, key=len, reverse=True):
        text = text.replace(spelling, REDACTED)
    text = _KEY_FLAG_VALUE.sub(_hide_flag_value, text)
    return _SERVER_ARGS_KEY.sub(_hide_server_args_key, text)


def _hide_flag_value(match):
    closing = "'" if match.group("quote") else ""
    return (match.group("quote") or "") + match.group("flag") + match.group("separator") + REDACTED + closing


def _hide_server_args_key(match):
    return match.group("name") + (f"'{REDACTED}'" if match.group("string") else REDACTED)
