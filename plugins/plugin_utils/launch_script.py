# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a server's launch script exports and execs, computed from structured settings.

The role's template only writes these out (shell-quoted); keeping the logic here makes it testable.
A server entry may override any setting (e.g. ``mem_fraction_static``); ``env`` and ``extra_args``
of a server are merged over the host-wide ones.
"""

from __future__ import annotations

import re
import shlex

from ansible_collections.gpuops.sglang.plugins.module_utils.procfs import MARKER_VAR
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

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# setproctitle, which SGLang uses to name its schedulers, overwrites /proc/<pid>/environ (and the
# marker with it) unless SPT_NOENV is set.
_MANAGED_ENV = (MARKER_VAR, "SPT_NOENV", "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")


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


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _server_settings(server, settings):
    merged = dict(settings)
    merged.update({key: value for key, value in server.items() if key not in ("env", "extra_args")})
    merged["env"] = dict(settings.get("env") or {}, **(server.get("env") or {}))
    merged["extra_args"] = dict(settings.get("extra_args") or {}, **(server.get("extra_args") or {}))
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
    flag = "--mamba-radix-cache-strategy" if new_name else "--mamba-scheduler-strategy"
    return [flag, strategy]


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


def _extra_flags(extra_args, rendered):
    flags = []
    for key, value in extra_args.items():
        flag = "--" + str(key).lstrip("-").replace("_", "-")
        if flag in rendered:
            raise LaunchScriptError(f"extra arg {key!r} duplicates {flag}, which is rendered from its own variable; set that "
                                    "variable instead")
        if value is None or value is False:
            continue
        flags.append(flag)
        if value is True:
            continue
        if isinstance(value, (list, tuple)):
            flags += [_text(item) for item in value]
        else:
            flags.append(_text(value))
    return flags


def launch_argv(server, settings):
    """The full command line (command + flags) the script execs for one server."""
    merged = _server_settings(server, settings)
    if not merged.get("model_path"):
        raise LaunchScriptError("model_path is required (sglang_model_path): a model directory or hub id")
    argv = _command(merged.get("command"))
    argv += ["--model-path", _text(merged["model_path"])]
    if merged.get("served_model_name"):
        argv += ["--served-model-name", _text(merged["served_model_name"])]
    argv += ["--host", _text(merged.get("host") or "127.0.0.1"), "--port", _text(merged["port"])]
    argv += ["--tp-size", _text(merged.get("tp_size", 1))]
    if int(merged.get("dp_size", 1)) > 1:
        argv += ["--dp-size", _text(merged["dp_size"])]
    for key, flag in _SIMPLE_FLAGS:
        if merged.get(key) not in (None, ""):
            argv += [flag, _text(merged[key])]
    if merged.get("enable_metrics"):
        argv.append("--enable-metrics")
    if merged.get("api_key"):
        argv += ["--api-key", _text(merged["api_key"])]
    argv += _mamba_flags(merged)
    argv += _speculative_flags(merged.get("speculative"))
    argv += _extra_flags(merged["extra_args"], set(argv))
    return argv


def launch_env(server, settings):
    """``[[name, value], ...]`` the script exports, in order: marker, SPT_NOENV, GPU order and GPUs, caches, NCCL,
    user env.

    User env overrides cache and NCCL values (NCCL_* entries are validated like a profile's).
    """
    merged = _server_settings(server, settings)
    env = {
        MARKER_VAR: merged["name"],
        "SPT_NOENV": "1",
        # CUDA numbers GPUs fastest first by default; nvidia-smi (and so the verified GPUs) by PCI bus.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in merged["gpus"]),
    }
    cache_dir = merged.get("cache_dir")
    if cache_dir:
        env.update((name, cache_dir.rstrip("/") + ("/" + sub if sub else "")) for name, sub in CACHE_ENV)
    env.update(resolve_nccl(merged.get("nccl")))
    user_env = {}
    for name, value in merged["env"].items():
        if not _ENV_NAME_RE.match(str(name)):
            raise LaunchScriptError(f"env variable name {name!r} is not a valid shell variable name")
        if name in _MANAGED_ENV:
            raise LaunchScriptError(f"env variable {name} is managed by the role (from the server's name and gpus)")
        user_env[str(name)] = _text(value)
    env.update(user_env)
    env.update(validate_nccl_env({name: value for name, value in user_env.items() if name.startswith("NCCL_")}))
    return [[name, value] for name, value in env.items()]


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
