# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a server's launch script exports and execs, computed from structured settings.

The role's template only writes these out (shell-quoted); keeping the logic here makes it testable.
A server entry may override any setting (e.g. ``mem_fraction_static``); ``env`` and ``extra_args``
of a server are merged over the host-wide ones.
"""

from __future__ import annotations

import re
import shlex

from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    DEPLOYMENT_VAR,
    MARKER_PREFIX,
    MARKER_VAR,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.option_ranges import (
    as_boolean,
    boolean_problem,
    kind,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import (
    REDACTED,
    credential_name,
    named_credentials,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_install import (
    interpreter_env as version_reader_env,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils import flag_check
from ansible_collections.gpuops.sglang.plugins.plugin_utils.nccl import (
    resolve_nccl,
    validate_nccl_env,
)

DEFAULT_COMMAND = ["python3", "-m", "sglang.launch_server"]

# SGLang renamed --mamba-scheduler-strategy in this release.
MAMBA_RADIX_CACHE_VERSION = (0, 5, 23)
MAMBA_STRATEGIES = ("auto", "no_buffer", "extra_buffer")
MAMBA_STRATEGIES_NEW = MAMBA_STRATEGIES + ("extra_buffer_lazy",)

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
# These load a separate draft model; without one SGLang uses the target as draft and crashes.
NEEDS_DRAFT_MODEL = ("EAGLE", "EAGLE3", "STANDALONE")
_SPECULATIVE_FLAGS = (
    ("draft_model_path", "--speculative-draft-model-path"),
    ("num_steps", "--speculative-num-steps"),
    ("eagle_topk", "--speculative-eagle-topk"),
    ("num_draft_tokens", "--speculative-num-draft-tokens"),
)

# Structured setting -> flag, in rendering order (after model, name, host, port, parallelism).
_SIMPLE_FLAGS = (
    ("base_gpu_id", "--base-gpu-id"),
    ("mem_fraction_static", "--mem-fraction-static"),
    ("max_running_requests", "--max-running-requests"),
    ("context_length", "--context-length"),
    ("max_mamba_cache_size", "--max-mamba-cache-size"),
    ("mamba_full_memory_ratio", "--mamba-full-memory-ratio"),
)

# Flags rendered from their own variables, with SGLang's aliases: sglang_extra_args may not set them, nor
# any argparse prefix of them (SGLang keeps allow_abbrev: --tp means --tp-size, --por means --port).
# The API key comes only from sglang_api_key, which the role sends to the servers' health checks too; other
# credentials (--admin-api-key, --hf-token) may be extra args: secrets.credential_name keeps them out of output.
RESERVED_FLAGS = {
    "--model-path": "sglang_model_path",
    "--model": "sglang_model_path",
    "--served-model-name": "sglang_served_model_name",
    "--host": "sglang_host",
    "--port": "sglang_base_port or the port of a sglang_servers entry",
    "--tp-size": "sglang_tp_size or the tp_size of a sglang_servers entry",
    "--tensor-parallel-size": "sglang_tp_size or the tp_size of a sglang_servers entry",
    "--dp-size": "sglang_dp_size or the dp_size of a sglang_servers entry",
    "--data-parallel-size": "sglang_dp_size or the dp_size of a sglang_servers entry",
    **{flag: "sglang_groups (a multi-node group)" for flag in ("--nnodes", "--node-rank", "--dist-init-addr",
                                                               "--nccl-init-addr")},
    **{flag: f"sglang_{key}" for key, flag in _SIMPLE_FLAGS},
    "--enable-metrics": "sglang_enable_metrics",
    "--api-key": "sglang_api_key",
    "--mamba-scheduler-strategy": "sglang_mamba_scheduler_strategy",
    "--mamba-radix-cache-strategy": "sglang_mamba_scheduler_strategy",
    "--speculative-algorithm": "sglang_speculative.algorithm",
    "--speculative-draft-model": "sglang_speculative.draft_model_path",
    **{flag: f"sglang_speculative.{key}" for key, flag in _SPECULATIVE_FLAGS},
}

# What a sglang_servers entry may override (the keys of the role's launch_scripts_settings, less the
# host-wide ones).
SERVER_SETTINGS = ("command", "version", "model_path", "served_model_name", "host", "base_gpu_id",
                   "mem_fraction_static", "max_running_requests", "context_length", "max_mamba_cache_size",
                   "mamba_full_memory_ratio", "enable_metrics", "speculative", "mamba_scheduler_strategy",
                   "extra_args", "env", "nccl", "cache_dir")
# Host-wide only: the role masks sglang_api_key alone, and state_dir names the deployment.
# installed_sglang: what each server interpreter of the host has installed (gpuops.sglang.host_lock's sglang).
HOST_SETTINGS = ("api_key", "state_dir", "flag_check", "installed_sglang")

# JIT caches on persistent disk so restarts stay warm (relative to cache_dir; "" = cache_dir itself).
CACHE_ENV = (
    ("SGLANG_CACHE_DIR", ""),
    ("TRITON_CACHE_DIR", "triton"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("CUDA_CACHE_PATH", "nv"),
    ("TILELANG_CACHE_DIR", "tilelang"),
    ("FLASHINFER_WORKSPACE_BASE", ""),
    ("SGLANG_DG_CACHE_DIR", "deep_gemm"),
    ("DG_JIT_CACHE_DIR", "deep_gemm"),
)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# An extra arg key is a flag name, nothing more: "port=1" would render --port=1.
_FLAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# What argparse takes for an option rather than a value ("-1" and "-0.5" stay values).
_LOOKS_LIKE_FLAG = re.compile(r"-[A-Za-z-]")
# setproctitle, which SGLang uses to name its schedulers, overwrites /proc/<pid>/environ (and the
# marker with it) unless SPT_NOENV is set.
_MANAGED_ENV = ("SPT_NOENV", "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")
_SCALARS = (str, int, float)


class LaunchScriptError(ValueError):
    """A setting that cannot be rendered; the message names it and what would be right."""


def parse_version(version):
    """``"0.5.23"``, ``"v0.5.9.post1"`` -> (0, 5, 23) / (0, 5, 9); None stays None."""
    if version in (None, ""):
        return None
    numbers = re.findall(r"\d+", str(version).lstrip("vV").split("post", maxsplit=1)[0])[:3]
    if not numbers:
        raise LaunchScriptError(f"sglang_version {version!r} is not a version like 0.5.23")
    return tuple(int(number) for number in numbers) + (0,) * (3 - len(numbers))


def api_key_problem(api_key):
    """Why ``api_key`` cannot be rendered, or None (None itself: no key). The message never holds the key."""
    if api_key is None:
        return None
    if not isinstance(api_key, _SCALARS) or isinstance(api_key, bool):
        return f"sglang_api_key must be a string, got a {kind(api_key)}"
    if not str(api_key).strip():
        return ("sglang_api_key is empty or only whitespace; set the key, or leave sglang_api_key unset (null) "
                "for servers without authentication")
    if str(api_key).startswith("-") and " " not in str(api_key):  # argparse takes a word with a space for a value
        return ("sglang_api_key starts with '-': SGLang's parser would take it for an option (--api-key would have no "
                "value); use a key that starts with a letter or digit")
    if any(ord(character) < 32 or ord(character) == 127 for character in str(api_key)):
        return ("sglang_api_key contains a newline or another control character: no HTTP client can send it in "
                "the Authorization header (SGLang's own warm-up request fails); use printable characters only")
    return None


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _server_settings(server, settings):
    merged = dict(settings)
    merged.update({key: value for key, value in server.items() if key not in ("env", "extra_args")})
    merged["extra_args"] = {**(settings.get("extra_args") or {}), **(server.get("extra_args") or {})}
    return merged


def _command(command):
    if command in (None, "", []):
        return list(DEFAULT_COMMAND)
    if isinstance(command, str):
        return shlex.split(command)
    return [_text(part) for part in command]


def _mamba_flags(merged):
    strategy = merged.get("mamba_scheduler_strategy")
    if strategy in (None, ""):
        return []
    version = parse_version(merged.get("version"))
    new_name = version is not None and version >= MAMBA_RADIX_CACHE_VERSION
    choices = MAMBA_STRATEGIES_NEW if new_name else MAMBA_STRATEGIES
    if strategy not in choices:
        hint = "" if new_name else " (extra_buffer_lazy needs sglang_version >= 0.5.23)"
        raise LaunchScriptError(f"mamba_scheduler_strategy {strategy!r} is not valid; use one of {', '.join(choices)}{hint}")
    if not new_name:
        return ["--mamba-scheduler-strategy", strategy]
    flags = ["--mamba-radix-cache-strategy", strategy]
    if strategy == "no_buffer":
        # Up to 0.5.10 SGLang turned the overlap schedule off itself for no_buffer; 0.5.23 asserts that it is off
        # (arg_groups/mamba_hook.py validate_mamba_no_buffer): the same setting, spelt for the version.
        given = {_extra_flag(key): value for key, value in (merged.get("extra_args") or {}).items()}
        if "--disable-overlap-schedule" not in given:
            flags.append("--disable-overlap-schedule")
        elif given["--disable-overlap-schedule"] in (None, False):
            raise LaunchScriptError("mamba_scheduler_strategy no_buffer needs the overlap schedule off from SGLang "
                                    "0.5.23 on (it refuses to start otherwise); drop disable_overlap_schedule: "
                                    f"{given['--disable-overlap-schedule']} from sglang_extra_args, or use "
                                    "extra_buffer")
    return flags


def _speculative_flags(speculative):
    if not speculative:
        return []
    algorithm = str(speculative.get("algorithm", "")).upper()
    if algorithm not in SPECULATIVE_ALGORITHMS:
        raise LaunchScriptError(f"speculative algorithm {speculative.get('algorithm')!r} is not valid; "
                                f"use one of {', '.join(SPECULATIVE_ALGORITHMS)}")
    if algorithm in NEEDS_DRAFT_MODEL and not speculative.get("draft_model_path"):
        raise LaunchScriptError(f"speculative algorithm {algorithm} needs draft_model_path (the draft model directory)")
    unknown = set(speculative) - {"algorithm"} - {key for key, _flag in _SPECULATIVE_FLAGS}
    if unknown:
        known = ", ".join(key for key, _flag in _SPECULATIVE_FLAGS)
        raise LaunchScriptError(f"unknown speculative settings {', '.join(sorted(unknown))}; use algorithm, {known}")
    flags = ["--speculative-algorithm", algorithm]
    for key, flag in _SPECULATIVE_FLAGS:
        if speculative.get(key) not in (None, ""):
            flags += [flag, _text(speculative[key])]
    return flags


def _reserved_variable(flag):
    """(rendered flag, variable to use instead) when ``flag`` equals, aliases or abbreviates a rendered flag."""
    if flag in RESERVED_FLAGS:
        return flag, RESERVED_FLAGS[flag]
    for reserved, variable in RESERVED_FLAGS.items():
        if reserved.startswith(flag):
            return reserved, variable
    return None


def _extra_values(key, value):
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    credential = credential_name(str(key))
    if credential and len(values) > 1:
        # Only the word after a credential flag is hidden in text (a command line in a message, a script's diff).
        raise LaunchScriptError(f"extra arg {key!r} is a credential: give it one value, not a list")
    for item in values:
        # The message is shown: a credential's value is not repeated in it.
        shown = REDACTED if credential else repr(item)
        if not isinstance(item, _SCALARS):
            raise LaunchScriptError(f"extra arg {key!r}: {shown} is not a string or number; use true for a bare "
                                    "flag, false/null to omit it, a value, or a list of values")
        if isinstance(item, str) and _LOOKS_LIKE_FLAG.match(item):
            raise LaunchScriptError(f"extra arg {key!r}: value {shown} would be parsed as a flag by SGLang; give "
                                    "every flag its own key in sglang_extra_args")
    return [_text(item) for item in values]


def _extra_flag(key):
    """The flag an sglang_extra_args key renders (``chunked_prefill_size``, ``--chunked-prefill-size``: the same)."""
    return "--" + str(key).lstrip("-").replace("_", "-")


def _extra_flags(extra_args):
    flags, keys_of_flag = [], {}
    for key, value in extra_args.items():
        if not _FLAG_NAME.fullmatch(str(key).lstrip("-")):
            raise LaunchScriptError(f"extra arg {key!r} is not a flag name; use the name alone (e.g. "
                                    "chunked_prefill_size: 4096), letters, digits, '_' and '-'")
        flag = _extra_flag(key)
        reserved = _reserved_variable(flag)
        if reserved:
            what = "is" if reserved[0] == flag else "abbreviates (argparse prefix)"
            raise LaunchScriptError(f"extra arg {key!r} {what} {reserved[0]}, which is rendered from its own "
                                    f"variable; set {reserved[1]} instead")
        if flag in keys_of_flag:
            raise LaunchScriptError(f"extra args {keys_of_flag[flag]!r} and {key!r} both render {flag}; keep one")
        keys_of_flag[flag] = key
        if value is None or value is False:
            continue
        flags.append(flag)
        if value is not True:
            flags += _extra_values(key, value)
    return flags


def interpreter_env(env):
    """The filter of that name: what of ``sglang_env`` host_lock's version reader gets (PATH, PYTHONPATH, ...)."""
    return version_reader_env(env)


def server_interpreters(servers, settings):
    """The interpreter of each server's command (``python3`` for the default one), each once: whose SGLang to read."""
    return list(dict.fromkeys(_command(_server_settings(server, settings).get("command"))[0] for server in servers))


def _installed(merged, interpreter):
    """What host_lock read for ``interpreter`` ({version, problem, ...}), or None when nothing was read."""
    return next((entry for entry in merged.get("installed_sglang") or []
                 if isinstance(entry, dict) and entry.get("interpreter") == interpreter), None)


def _render_version(merged, interpreter):
    """The SGLang version the flags are rendered for: sglang_version, else what the host has installed."""
    configured = merged.get("version") or None
    installed = (_installed(merged, interpreter) or {}).get("version")
    if configured and installed and parse_version(configured) != parse_version(installed):
        raise LaunchScriptError(f"sglang_version is {configured}, but {interpreter} on this host runs SGLang "
                                f"{installed}; set sglang_version: {installed!r}, or leave it unset to render for "
                                "what is installed")
    return configured or installed


def _checks_flags(merged):
    value = merged.get("flag_check", True)
    if value is None:
        return True
    problem = boolean_problem("flag_check", value)
    if problem:
        raise LaunchScriptError(problem)
    return as_boolean(value)


def launch_argv(server, settings):
    """The full command line (command + flags) the script execs for one server, its flags checked against the parser
    of the SGLang version that will run them (where that version has a table; sglang_flag_check: false skips it)."""
    merged = _server_settings(server, settings)
    if not merged.get("model_path"):
        raise LaunchScriptError("model_path is required (sglang_model_path): a model directory or hub id")
    command = _command(merged.get("command"))
    merged["version"] = _render_version(merged, command[0])
    argv = list(command)
    argv += ["--model-path", _text(merged["model_path"])]
    if merged.get("served_model_name"):
        argv += ["--served-model-name", _text(merged["served_model_name"])]
    argv += ["--host", _text(merged.get("host") or "127.0.0.1"), "--port", _text(merged["port"])]
    argv += ["--tp-size", _text(merged.get("tp_size", 1))]
    if int(merged.get("dp_size", 1)) > 1:
        argv += ["--dp-size", _text(merged["dp_size"])]
    node = merged.get("node")
    if node:  # a rank of a multi-node group (sglang_groups)
        argv += ["--nnodes", _text(node["nnodes"]), "--node-rank", _text(node["node_rank"]),
                 "--dist-init-addr", _text(node["dist_init_addr"])]
    for key, flag in _SIMPLE_FLAGS:
        if merged.get(key) not in (None, ""):
            argv += [flag, _text(merged[key])]
    metrics = merged.get("enable_metrics")
    if metrics is not None and boolean_problem("enable_metrics", metrics):
        raise LaunchScriptError(boolean_problem("enable_metrics", metrics))
    if metrics is not None and as_boolean(metrics):
        argv.append("--enable-metrics")
    problem = api_key_problem(merged.get("api_key"))
    if problem:
        raise LaunchScriptError(problem)
    if merged.get("api_key") is not None:
        argv += ["--api-key", _text(merged["api_key"])]
    argv += _mamba_flags(merged)
    argv += _speculative_flags(merged.get("speculative"))
    argv += _extra_flags(merged["extra_args"])
    table = flag_check.table_version(merged["version"]) if _checks_flags(merged) else None
    if table:
        problems, _warnings = flag_check.check_flags(argv[len(command):], table)
        if problems:
            raise LaunchScriptError(f"server {merged.get('name')}: " + "; ".join(problems) +
                                    " (sglang_flag_check: false skips this check, e.g. for a fork of SGLang)")
    return argv


def launch_check(servers, settings):
    """``{"problems", "notes"}`` of the servers' command lines, before any is rendered into a script: why a line
    cannot be rendered or would be refused by the SGLang that will run it (each naming its server and what would be
    right; never a credential), and what the operator should know (SGLang is not installed or has no flag table
    here, a flag is deprecated or abbreviated), each said once."""
    problems, notes = [], []
    for server in servers:
        merged = _server_settings(server, settings)
        command = _command(merged.get("command"))
        installed = _installed(merged, command[0])
        if installed and installed.get("problem"):
            notes.append(installed["problem"])
        try:
            argv = launch_argv(server, settings)
        except LaunchScriptError as exc:
            problems.append(str(exc))
            continue
        version = _render_version(merged, command[0])
        if not version and installed is None:
            # Nothing asked the host which SGLang it has (the launch_scripts role on its own holds nothing).
            notes.append(f"the SGLang of {command[0]} on the host was not read (nothing held the host) "
                         "and sglang_version is unset: the flags are rendered for no particular version and not "
                         "checked; a real run reads it and may render or refuse otherwise")
        if not version or not _checks_flags(merged):
            continue
        table = flag_check.table_version(version)
        if table:
            notes += [f"server {merged.get('name')}: {warning}"
                      for warning in flag_check.check_flags(argv[len(command):], table)[1]]
        else:
            notes.append(f"SGLang {version} has no flag table here (tables: {', '.join(flag_check.known_versions())}):"
                         " its flags were not checked before the launch")
    return {"problems": list(dict.fromkeys(problems)), "notes": list(dict.fromkeys(notes))}


def _user_env(env, variable):
    """``env`` (from ``variable``) as strings; refuses names the role manages."""
    user_env = {}
    for name, value in env.items():
        name = str(name)
        if not _ENV_NAME.fullmatch(name):
            raise LaunchScriptError(f"{variable}: {name!r} is not a valid shell variable name")
        if name.startswith(MARKER_PREFIX):
            raise LaunchScriptError(f"{variable}: {name} is an ownership marker the role sets (from the server's "
                                    "name and sglang_state_dir); remove it")
        if name in _MANAGED_ENV:
            raise LaunchScriptError(f"{variable}: {name} is managed by the role (from the server's name and gpus)")
        if not isinstance(value, _SCALARS):
            raise LaunchScriptError(f"{variable}: {name} must be a string or number, got a {kind(value)}")
        user_env[name] = _text(value)
    return user_env


def launch_env(server, settings):
    """``[[name, value], ...]`` the script exports, in order: markers, SPT_NOENV, GPU order and GPUs, caches,
    NCCL, user env.

    User env (host-wide, then the server's own) overrides cache and NCCL values (NCCL_* entries are
    validated like a profile's).
    """
    merged = _server_settings(server, settings)
    if not merged.get("state_dir"):
        raise LaunchScriptError("state_dir is required (sglang_state_dir): the script marks its server as this "
                                "deployment's")
    env = {
        MARKER_VAR: merged["name"],
        # A server started from its script by hand or at boot still belongs to its deployment.
        DEPLOYMENT_VAR: _text(merged["state_dir"]),
        "SPT_NOENV": "1",
        # CUDA numbers GPUs fastest first by default; nvidia-smi (and so the verified GPUs) by PCI bus.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in merged["gpus"]),
    }
    cache_dir = merged.get("cache_dir")
    if cache_dir:
        env.update((name, cache_dir.rstrip("/") + ("/" + sub if sub else "")) for name, sub in CACHE_ENV)
    env.update(resolve_nccl(merged.get("nccl")))
    user_env = _user_env(settings.get("env") or {}, "sglang_env")
    user_env.update(_user_env(server.get("env") or {}, f"env of server {merged['name']!r}"))
    env.update(user_env)
    env.update(validate_nccl_env({name: value for name, value in user_env.items() if name.startswith("NCCL_")}))
    return [[name, value] for name, value in env.items()]


def launch_script(server, settings, managed="Ansible managed"):
    """The text of one server's launch script: its environment exported, its cache directories made, its command line
    exec'd one flag per line, every value shell-quoted. ``managed``: the header line (Ansible's ansible_managed)."""
    gpus = ",".join(str(gpu) for gpu in server["gpus"])
    lines = ["#!/bin/sh", f"# {managed}", f"# SGLang server {server['name']}: GPUs {gpus}, port {server['port']}.",
             "# Every setting lives in this file, so the server starts the same after a reboot.",
             "set -e"]
    lines += [f"export {name}={shlex.quote(str(value))}" for name, value in launch_env(server, settings)]
    directories = cache_dirs(server, settings)
    if directories:
        lines.append("mkdir -p " + " ".join(shlex.quote(directory) for directory in directories))
    lines.append("exec" + "".join((" \\\n    " if arg.startswith("--") else " ") + shlex.quote(arg)
                                  for arg in launch_argv(server, settings)))
    return "\n".join(lines) + "\n"


def launch_scripts(servers, settings, managed="Ansible managed"):
    """``[{name, path, content}]``: the launch script of every server, for the modules that write them."""
    return [{"name": server["name"], "path": server["launch_script"],
             "content": launch_script(server, settings, managed)} for server in servers]


def launch_script_candidates(servers, settings, managed="Ansible managed"):
    """The launch scripts of ``servers`` for each SGLang the host may have, rendered before the host is read, so that
    its hold can tell a relaunch with nothing to change in one call (module_utils/converge.py): for sglang_version when
    it is set, else for every version with a flag table. ``[{"sglang": [{interpreter, version}], "scripts",
    "notes"}]``: the scripts as the run would render them had the hold read that version; none for a version whose
    launch would be refused (the run's own render says why)."""
    interpreters = server_interpreters(servers, settings)
    versions = [settings["version"]] if settings.get("version") else flag_check.known_versions()
    candidates = []
    for version in versions:
        assumed = dict(settings, installed_sglang=[{"interpreter": interpreter, "version": str(version)}
                                                   for interpreter in interpreters])
        check = launch_check(servers, assumed)
        if not check["problems"]:
            candidates.append({"sglang": assumed["installed_sglang"], "notes": check["notes"],
                               "scripts": launch_scripts(servers, assumed, managed)})
    return candidates


def launch_credentials(servers, settings=None):
    """The credentials that launch scripts of ``servers`` (sglang_servers, the topology's output) and ``settings``
    (launch settings, sglang_groups) hold: the API key and the values of credential-like environment variables and
    extra args (HF_TOKEN, --admin-api-key), for the role to keep out of its output. Read from the settings as they
    are (nothing rendered), so settings not yet checked may be given."""
    return sorted(set(named_credentials([servers, settings])))


def cache_dirs(server, settings):
    """Directories the script creates before exec (caches must exist for some JIT backends)."""
    cache_dir = _server_settings(server, settings).get("cache_dir")
    if not cache_dir:
        return []
    return sorted({cache_dir.rstrip("/") + ("/" + sub if sub else "") for _name, sub in CACHE_ENV})


def local_model_paths(servers, settings):
    """Absolute model and draft model directories of all servers (hub ids like ``org/model`` are skipped)."""
    paths = set()
    for server in servers:
        merged = _server_settings(server, settings)
        for path in (merged.get("model_path"), (merged.get("speculative") or {}).get("draft_model_path")):
            if isinstance(path, str) and path.startswith("/"):
                paths.add(path)
    return sorted(paths)
