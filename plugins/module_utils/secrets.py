# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place where API keys and other credentials are hidden from what the collection shows or stores.

What counts as a credential is decided here once (``credential_name``): the value of SGLang's key flags
(``--api-key``, ``--admin-api-key``, ``--ssl-keyfile-password`` and the prefixes its argparse accepts) and of
every environment variable or flag whose name ends like a credential (``HF_TOKEN``, ``--hf-token``,
``OPENAI_API_KEY``, ``*_SECRET``, ``PGPASSWORD``), except SGLang's own settings that merely end so.

Three ways in, because a credential reaches us in three shapes:

- ``scrub_argv``: an argv list (``/proc/<pid>/cmdline``); exact per element, so a key holding any
  character (spaces, quotes, a newline) is hidden whole;
- ``scrub_text``: free text (log lines, messages, diffs of launch scripts, joined command lines): the
  known secret values, the value after a credential flag or in a credential's ``export`` (a shell word,
  quoted or not) and the key in SGLang's ``server_args`` dump (a Python string literal);
- ``scrub_data``: stored records (job records, the run journal): every text, and every value stored under a
  credential's name.

Stdlib only (runs on the GPU host); every pattern is linear in the length of the text.
"""

import re
import shlex

REDACTED = "********"
# SGLang's own credential flags (0.5.23). Its argparse accepts any unambiguous prefix of a flag: hide the value
# after "--api", "--api-k", ... too.
_KEY_FLAGS = (("--api-key", "--api"), ("--admin-api-key", "--admin"), ("--ssl-keyfile-password", "--ssl-keyfile-"))
_KEY_FLAG_SPELLINGS = frozenset(
    flag[:length] for flag, shortest in _KEY_FLAGS for length in range(len(shortest), len(flag) + 1))
# Any other name ending so holds a credential (HF_TOKEN, --hf-token, OPENAI_API_KEY, AWS_SECRET, PGPASSWORD): the
# end, not any part, as SGLang has many settings with TOKEN inside (SGLANG_INIT_NEW_TOKEN_RATIO, TOKENIZERS_...).
_CREDENTIAL_ENDINGS = ("token", "key", "secret", "password", "passwd")
# SGLang's own settings that end so but hold no secret: a histogram's buckets, a count per token, switches.
_NOT_CREDENTIALS = ("bucket-time-to-first-token", "kt-max-deferred-experts-per-token",
                    "sglang-use-aiter-fp8-per-token", "sglang-log-decode-graph-key")
# "-" and "_" alike, any case: --hf-token is the hf_token of sglang_extra_args, HF_TOKEN an environment variable.
_NAME_END = r"(?![\w-])"
_CREDENTIAL_NAME = (
    r"(?i:(?!(?:" + "|".join("[-_]".join(map(re.escape, name.split("-"))) for name in _NOT_CREDENTIALS) + ")"
    + _NAME_END + r")[\w-]*(?:" + "|".join(_CREDENTIAL_ENDINGS) + ")" + _NAME_END + ")")
_CREDENTIAL_NAME_RE = re.compile(_CREDENTIAL_NAME)

_FLAG_ALTERNATIVES = "|".join(
    [re.escape(spelling) for spelling in sorted(_KEY_FLAG_SPELLINGS, key=len, reverse=True)] + ["--" + _CREDENTIAL_NAME])
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
# A launch script's "export HF_TOKEN=<shell word>" (the diff of a script shows the previous value too).
_CREDENTIAL_EXPORT = re.compile(
    r"(?m)^(?P<name>[ \t]*export[ \t]+" + _CREDENTIAL_NAME + "=)(?:" + _HIDDEN_ALREADY + "|" + _SHELL_WORD + ")")

# SGLang logs its ServerArgs: "api_key='...'" (classic), "'api_key': '...'" (new), also seen as JSON; its credential
# fields are those of the key flags. repr() picks double quotes for a key holding a single quote, and escapes
# backslashes and newlines.
_PYTHON_STRING = r"""'[^'\\\n]*(?:\\.[^'\\\n]*)*'?|"[^"\\\n]*(?:\\.[^"\\\n]*)*"?"""
_SERVER_ARGS_FIELDS = "|".join(flag[2:].replace("-", "_") for flag, _shortest in _KEY_FLAGS)
_SERVER_ARGS_KEY = re.compile(
    r"""(?<![\w'"])(?P<name>(?P<quote>['"]?)(?:""" + _SERVER_ARGS_FIELDS + r""")(?P=quote)\s*[=:]\s*)"""
    r"""(?:(?P<string>""" + _PYTHON_STRING + r""")|(?!None\b)[^\s,)}'"]+)""")


def credential_name(name):
    """Whether ``name`` holds a credential: an environment variable, a flag or an extra arg's key (``HF_TOKEN``,
    ``--hf-token``, ``hf_token``, ``--api``)."""
    bare = name.lstrip("-")
    return "--" + bare.replace("_", "-") in _KEY_FLAG_SPELLINGS or bool(_CREDENTIAL_NAME_RE.fullmatch(bare))


def named_credentials(value):
    """The texts stored under a credential's name anywhere in JSON-like ``value``: launch settings and server
    entries (``{"api_key": V}``, ``{"env": {"HF_TOKEN": V}}``, ``{"extra_args": {"hf_token": [V, ...]}}``)."""
    if isinstance(value, list):
        return [found for item in value for found in named_credentials(item)]
    if not isinstance(value, dict):
        return []
    found = []
    for key, item in value.items():
        if not (isinstance(key, str) and credential_name(key)):
            found += named_credentials(item)
            continue
        for scalar in item if isinstance(item, list) else [item]:
            if isinstance(scalar, (str, int, float)) and not isinstance(scalar, bool) and str(scalar):
                found.append(str(scalar))
    return found


def _with_credentials(argv):
    """``(argument, the credential it is or ends with, or None)`` for each element of ``argv``: the one after a
    credential flag, the value of ``--hf-token=V`` and of an assignment (``env HF_TOKEN=V sglang ...``)."""
    credential_next = False
    for arg in argv:
        if credential_next:
            credential_next = False
            yield arg, arg
            continue
        name, equals, value = arg.partition("=")
        if equals and credential_name(name):
            yield arg, value
            continue
        credential_next = name.startswith("-") and credential_name(name)
        yield arg, None


def scrub_argv(argv):
    """A copy of ``argv`` with the value of every credential flag (``--api-key V``, ``--hf-token=V``, prefixes) hidden."""
    return [arg if credential is None else arg[:len(arg) - len(credential)] + REDACTED
            for arg, credential in _with_credentials(argv)]


def argv_credentials(argv):
    """The values of the credential flags in ``argv`` (what ``scrub_argv`` hides)."""
    return [credential for _arg, credential in _with_credentials(argv) if credential]


def _spellings(secret):
    """How ``secret`` appears in text: as is, shell-quoted (launch scripts) and inside a Python repr (logs)."""
    return {secret, shlex.quote(secret), repr(secret)[1:-1]}


def scrub_text(text, secrets=()):
    """``text`` with ``secrets`` and every credential value hidden; None stays None.

    Known values go first, longest first (a secret containing another is hidden whole). Then the value
    after a credential flag, in a credential's ``export`` and the key in SGLang's server_args dumps, even when
    nobody told us that value (the previous key of a rotation, shown in a diff's before side); ``api_key=None`` stays.
    """
    if text is None:
        return None
    for spelling in sorted({form for secret in secrets if secret for form in _spellings(secret)}, key=len, reverse=True):
        text = text.replace(spelling, REDACTED)
    text = _KEY_FLAG_VALUE.sub(_hide_flag_value, text)
    text = _CREDENTIAL_EXPORT.sub(lambda match: match.group("name") + REDACTED, text)
    return _SERVER_ARGS_KEY.sub(_hide_server_args_key, text)


def scrub_data(value, secrets=()):
    """A copy of JSON-like ``value`` (a job record, journal lines) as it may be stored or shown: every text
    scrubbed, lists of texts as argv too, the text stored under a credential's name (``{"HF_TOKEN": ...}``,
    ``{"--hf-token": ...}``) and the values of a change of a credential setting (``{"setting": "HF_TOKEN",
    "before", "after"}``) hidden."""
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, list):
        if all(isinstance(item, str) for item in value):
            value = scrub_argv(value)
        return [scrub_data(item, secrets) for item in value]
    if not isinstance(value, dict):
        return value
    setting = value.get("setting")
    hidden_keys = ("before", "after") if isinstance(setting, str) and credential_name(setting) else ()
    return {key: REDACTED if isinstance(item, str) and (key in hidden_keys or credential_name(key))
            else scrub_data(item, secrets) for key, item in value.items()}


def _hide_flag_value(match):
    closing = "'" if match.group("quote") else ""
    return (match.group("quote") or "") + match.group("flag") + match.group("separator") + REDACTED + closing


def _hide_server_args_key(match):
    return match.group("name") + (f"'{REDACTED}'" if match.group("string") else REDACTED)
