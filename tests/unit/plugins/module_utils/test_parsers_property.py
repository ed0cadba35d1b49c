"""Every parser on random, binary, truncated and huge input: it never raises, returns its documented shape,
and stays linear on the near-matches that make backtracking patterns take minutes."""

import json
import os

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import http_probe, procfs
from ansible_collections.gpuops.sglang.plugins.module_utils.nvidia_smi import (
    COMPUTE_APP_FIELDS,
    GPU_FIELDS,
    NvidiaSmiError,
    parse_csv,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.prometheus import (
    parse_metrics,
    sglang_gauges,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log import (
    PHASES,
    LogState,
    parse_log,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=200, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
MEGABYTE = 1024 * 1024

# Fragments of real lines, so random input often gets deep into the patterns.
LOG_FRAGMENTS = st.sampled_from([
    "[2026-01-01 00:00:00] ", "[2026-01-01 00:00:00.123 DP0 TP1 EP1] ", "llm0-1  | ", "\x1b[36m", "\r", "\n",
    "Load weight begin. avail mem=", "Load weight end. elapsed=", "max_total_num_tokens=", "context_len=",
    "KV Cache is allocated. #tokens: ", "Capture cuda graph begin.", "Capture draft cuda graph end. Time elapsed: ",
    "Capturing batches (bs=1 avail_mem=1 GB):  1%|", "| 1/", "Loading safetensors checkpoint shards: ",
    "% Completed | ", "Traceback (most recent call last):", '  File "x.py", line 1, in sigquit_handler',
    "RuntimeError: boom", "Received sigquit from a child proces", "Engine startup timings (s): cuda_graph={",
    "Mamba Cache is allocated. max_mamba_cache_size: ", " size: ", "GB", "12x3", "1.2.3", "9" * 50, "=", ",",
    "Killed", "--- Logging error ---", "The server is fired up and ready to roll!",
])
LOG_TEXT = st.lists(st.one_of(LOG_FRAGMENTS, st.text(max_size=20)), max_size=60).map("".join)


def assert_log_shape(result):
    assert result["phase"] in PHASES
    assert result["component"] in ("target", "draft")
    assert set(result["progress"]) == {"weights", "cuda_graph"}
    for counter in result["progress"].values():
        assert counter is None or (isinstance(counter["done"], int) and isinstance(counter["total"], int))
    assert all(isinstance(value, (int, float, str, dict)) for value in result["facts"].values())
    assert result["error"] is None or isinstance(result["error"]["summary"], str)
    assert all(entry["phase"] in PHASES for entry in result["timeline"])


@SETTINGS
@given(LOG_TEXT, st.integers(min_value=1, max_value=50))
def test_log_parser_never_raises_and_chunking_does_not_matter(text, chunk_size):
    whole = parse_log(text)
    assert_log_shape(whole)
    state = LogState()
    for start in range(0, len(text), chunk_size):
        state.feed_text(text[start:start + chunk_size])
    state.flush()
    assert state.as_dict() == whole


@SETTINGS
@given(st.binary(max_size=2000))
def test_log_parser_on_binary_garbage(data):
    assert_log_shape(parse_log(data.decode("utf-8", "replace")))


GPU_LINE = st.lists(st.one_of(st.sampled_from(["0", "GPU-x", "NVIDIA H200", "143771", "[N/A]", "00000000:00:06.0",
                                               "12x3", "", " MiB"]), st.text(max_size=8)),
                    max_size=9).map(", ".join)


@SETTINGS
@given(st.lists(GPU_LINE, max_size=5).map("\n".join), st.sampled_from([GPU_FIELDS, COMPUTE_APP_FIELDS]))
def test_nvidia_smi_csv_parses_or_says_why(text, fields):
    try:
        rows = parse_csv(text, fields)
    except NvidiaSmiError as error:
        assert str(error).startswith("unexpected nvidia-smi")
        return
    for row in rows:
        assert set(row) == {field.key for field in fields}


METRIC_LINE = st.lists(st.one_of(st.sampled_from(['sglang:token_usage', '{', '}', 'tp_rank="', 'dp_rank="0"', '"',
                                                  ",", " ", "1", "x", "NaN", "+Inf", "\\", "#", "1723456789000"]),
                                 st.text(max_size=6)), max_size=20).map("".join)


@SETTINGS
@given(st.lists(METRIC_LINE, max_size=8).map("\n".join))
def test_prometheus_parser_never_raises(text):
    for samples in parse_metrics(text).values():
        for sample in samples:
            assert isinstance(sample["value"], float) and isinstance(sample["labels"], dict)
    gauges = sglang_gauges(text)
    assert all(value is None or isinstance(value, float) for value in gauges.values())


@SETTINGS
@given(st.dictionaries(st.sampled_from(["stat", "environ", "cmdline", "net/tcp", "net/tcp6"]),
                       st.one_of(st.binary(max_size=300),
                                 st.sampled_from([b"1 (sh) S 1 1 1", b"1 (a) b) R 0 1 1 0 " + b"9 " * 50,
                                                  b"1 (sh) S x y z", b"sl local\n 0: 0100007F:ZZZZ 0 0A " + b"1 " * 8,
                                                  b"A=1\0B\0=2\0\xff\xfe=\xff\0"]))))
def test_proc_readers_never_raise(tmp_path_factory, files):
    proc_root = tmp_path_factory.mktemp("proc")
    for name, content in files.items():
        directory = proc_root / "42" if not name.startswith("net/") else proc_root
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    (proc_root / "42").mkdir(exist_ok=True)
    info = procfs.read_process(42, str(proc_root))
    assert info is None or (info.pid == 42 and isinstance(info.starttime, int))
    assert all(isinstance(key, str) for key in procfs.read_environ(42, str(proc_root)))
    assert isinstance(procfs.port_listeners(30000, str(proc_root)), list)
    assert isinstance(procfs.list_processes(str(proc_root)), list)


# Inputs that a backtracking pattern needs minutes or more for; each must parse (correctly) at once.
NEAR_MATCHES = [
    "x" * MEGABYTE,
    "api_key=" * (MEGABYTE // 8),
    "[" * MEGABYTE,
    "Traceback " * (MEGABYTE // 10),
    "7" * MEGABYTE,
    "a=" * (MEGABYTE // 2),
    "Engine startup timings (s): cuda_graph={" + "cuda_graph={" * (MEGABYTE // 12),
    "Engine startup timings (s): cuda_graph={" + "a" * MEGABYTE + "}",
    "Mamba Cache is allocated. max_mamba_cache_size: 1, " + "a" * MEGABYTE,
    "max_total_num_tokens=1, " + "a" * MEGABYTE,
    "Capture " + "a " * (MEGABYTE // 2),
    '  File "' + "x" * MEGABYTE,
    "script: line 9: " + "1" * MEGABYTE,
    "\x1b[" + ";" * MEGABYTE,
]


@pytest.mark.parametrize("line", NEAR_MATCHES, ids=lambda line: repr(line[:16]))
def test_log_parser_is_linear_on_huge_near_matches(line):
    for prefix in ("", "[2026-01-01 00:00:00 TP0] "):
        state = LogState()
        state.feed_line(prefix + line)
        assert state.last_line == (prefix + line).rstrip()
        assert state.phase in PHASES


def test_log_parser_keeps_facts_of_a_huge_summary_line():
    state = LogState()
    state.feed_line("[2026-01-01 00:00:00] max_total_num_tokens=12x3, context_len=4096, " + "pad=1, " * 100000)
    assert state.facts["context_len"] == 4096 and "max_total_num_tokens" not in state.facts


@pytest.mark.parametrize("text", [
    "x" * MEGABYTE, "x{" + 'a="' * (MEGABYTE // 3), "x{" + "a" * MEGABYTE + "} 1", 'x{a="1"' + " " * MEGABYTE + "z",
    "x 1" + " " * MEGABYTE + "a", "x{" + 'a="1",' * (MEGABYTE // 6) + "} 1", "1" * MEGABYTE,
])
def test_prometheus_parser_is_linear_on_huge_near_matches(text):
    metrics = parse_metrics(text)
    expected = 1 if text.startswith("x{" + 'a="1",') else 0
    assert sum(len(samples) for samples in metrics.values()) == expected


def test_nvidia_smi_csv_is_linear_on_a_huge_line():
    with pytest.raises(NvidiaSmiError, match="expected 7 columns"):
        parse_csv("0," * MEGABYTE, GPU_FIELDS)
    with pytest.raises(NvidiaSmiError, match="for memory.used"):
        parse_csv(f"0, GPU-x, H200, {'9' * 5000}, 1, 1, 00000000:00:06.0\n", GPU_FIELDS)


class _Server:
    def __init__(self, body):
        self.body = body

    def __call__(self, url, timeout, api_key=None):
        return 200, self.body, None


@pytest.mark.parametrize("body, kind", [("[1, 2]", "list"), ('"up"', "string"), ("3", "number"), ("null", "null"),
                                        ("true", "boolean")])
def test_get_json_refuses_what_is_not_an_object(monkeypatch, body, kind):
    monkeypatch.setattr(http_probe, "http_get", _Server(body))
    assert http_probe.get_json("http://h/get_server_info", 1) == (
        None, f"expected a JSON object from http://h/get_server_info, got {kind}")


def test_get_json_on_invalid_and_absurdly_nested_json(monkeypatch):
    for body in ("{", "[" * 100000, json.dumps({"a": 1})[:-1]):
        monkeypatch.setattr(http_probe, "http_get", _Server(body))
        document, error = http_probe.get_json("http://h/x", 1)
        assert document is None and error.startswith("invalid JSON from http://h/x")
    monkeypatch.setattr(http_probe, "http_get", _Server('{"version": "0.5.9"}'))
    assert http_probe.get_json("http://h/x", 1) == ({"version": "0.5.9"}, None)


def test_environ_and_stat_of_a_real_process_still_parse():
    assert procfs.read_process(os.getpid()).pid == os.getpid()
