"""The simulator under load: request shapes, admission, throughput, metrics - the truth a probe is tested against.

Rates are set per server (SGLANG_SIM_DECODE_TOKENS_PER_S ...) so each test runs in a few seconds.
"""

import http.client
import json
import os
import re
import signal
import socket
import threading
import time

import pytest

from .conftest import wait_for

TS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
FAST = {"SGLANG_SIM_DECODE_TOKENS_PER_S": "400"}


def post(port, path, body, headers=None, chunked=False):
    """(status, parsed JSON body) of a POST; ``chunked``: the body in two chunks, without Content-Length (as smg
    forwards one with its retries off)."""
    payload = json.dumps(body).encode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body=iter([payload[:7], payload[7:]]) if chunked else payload,
                           headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def stream(port, path, body, on_event=None):
    """Every SSE event of a streamed POST in order (``"[DONE]"`` as that string); on_event(event) as each arrives."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body=json.dumps(dict(body, stream=True)),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
        assert response.getheader("Transfer-Encoding") == "chunked"
        events = []
        for line in iter(response.readline, b""):
            if line.startswith(b"data: "):
                data = line[len(b"data: "):].strip()
                events.append("[DONE]" if data == b"[DONE]" else json.loads(data))
                if on_event:
                    on_event(events[-1])
            else:
                assert line == b"\n", line  # each event ends with a blank line
        return events
    finally:
        connection.close()


def metric(text, name, **labels):
    for line in text.splitlines():
        match = re.fullmatch(rf"sglang:{name}\{{([^}}]*)\}} (\S+)", line)
        if match and all(f'{key}="{value}"' in match[1] for key, value in labels.items()):
            return float(match[2])
    raise AssertionError(f"no sample sglang:{name}{labels or ''} in /metrics")


def metrics(server):
    status, body = server.get("/metrics")
    assert status == 200
    return body


def decode_lines(server):
    return re.findall(rf"^\[{TS}( DP\d TP\d)?\] (Decode batch, .*)$", server.log(), re.MULTILINE)


def test_a_chunked_request_body_is_read_as_one_with_a_length(launch):
    # smg forwards a request chunked when its retries are off; uvicorn (h11) reads it like any other
    server = launch(env=FAST)
    server.wait_ready()
    body = {"text": "x" * 41, "sampling_params": {"max_new_tokens": 13}}
    chunked, plain = post(server.port, "/generate", body, chunked=True), post(server.port, "/generate", body)
    assert chunked[0] == plain[0] == 200
    assert chunked[1]["meta_info"]["prompt_tokens"] == plain[1]["meta_info"]["prompt_tokens"] == 10


def test_max_new_tokens_and_response_shapes(launch):
    server = launch("--enable-metrics", env=FAST)
    server.wait_ready()
    port = server.port

    status, out = post(port, "/generate", {"text": "x" * 41, "sampling_params": {"max_new_tokens": 13}})
    assert status == 200
    assert out["meta_info"]["completion_tokens"] == len(out["output_ids"]) == 13
    assert out["meta_info"]["prompt_tokens"] == 10  # about 4 characters a token
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 13}
    assert out["text"].startswith(" Paris. It is the capital of France Paris.")
    assert out["meta_info"]["e2e_latency"] == pytest.approx(12 / 400, abs=0.01)
    # input_ids count as they are; SGLang's default max_new_tokens; ignore_eos changes nothing
    status, out = post(port, "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"ignore_eos": True}})
    assert (out["meta_info"]["prompt_tokens"], out["meta_info"]["completion_tokens"]) == (3, 128)
    status, outs = post(port, "/generate", {"text": ["a" * 8, "b" * 80], "sampling_params": {"max_new_tokens": 2}})
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [2, 20]
    assert post(port, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": -1}}) == \
        (400, {"error": {"message": "max_new_tokens must be at least 0, got -1."}})
    status, out = post(port, "/generate", {"text": "x" * 4, "sampling_params": {"max_new_tokens": 262143}})
    assert status == 400 and out["error"]["message"].startswith("Requested token count exceeds the model's maximum "
                                                                "context length of 262144 tokens.")

    status, out = post(port, "/v1/completions", {"model": "m", "prompt": "y" * 40})
    assert status == 200
    assert set(out) == {"id", "object", "created", "model", "choices", "usage"}
    assert (out["object"], out["model"]) == ("text_completion", "m")
    assert out["choices"] == [{"index": 0, "text": " Paris. It is the capital of France Paris. It is the capital of "
                               "France", "logprobs": None, "finish_reason": "length", "matched_stop": None}]
    assert out["usage"] == {"prompt_tokens": 10, "completion_tokens": 16, "total_tokens": 26, "reasoning_tokens": 0}
    status, out = post(port, "/v1/completions", {"prompt": [5] * 7, "max_tokens": 3, "ignore_eos": True})
    assert out["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "reasoning_tokens": 0}
    assert out["model"] == "default"

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    status, out = post(port, "/v1/chat/completions", {"messages": messages, "max_completion_tokens": 5})
    assert status == 200 and out["object"] == "chat.completion"
    assert out["choices"][0]["message"] == {"role": "assistant", "content": " Paris. It is the",
                                            "reasoning_content": None, "tool_calls": None}
    assert out["choices"][0]["finish_reason"] == "length"
    usage = out["usage"]
    assert usage["completion_tokens"] == 5 and usage["prompt_tokens"] > 7
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5
    status, out = post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 2})
    assert out["usage"]["completion_tokens"] == 2
    status, out = post(port, "/v1/chat/completions", {"messages": []})
    assert status == 400 and out["object"] == "error" and out["code"] == 400 and "messages" in out["message"]

    # every served request counts, the warmup included (7 prompt tokens, 8 generated)
    text = metrics(server)
    assert metric(text, "num_requests_total") == 9
    assert metric(text, "generation_tokens_total") == 8 + 13 + 128 + 2 + 2 + 16 + 3 + 5 + 2
    assert metric(text, "prompt_tokens_total") == 7 + 10 + 3 + 2 + 20 + 10 + 7 + 2 * usage["prompt_tokens"]
    assert metric(text, "e2e_request_latency_seconds_count") == 9
    assert metric(text, "time_to_first_token_seconds_bucket", le="+Inf") == 9
    assert "full_token_usage" not in text  # v0.5.23 only


def test_streams_are_cumulative_and_end_with_done(launch):
    # 3 s of decoding: a loaded machine that starves the server for a while still sees it stream in many chunks.
    server = launch(env={"SGLANG_SIM_DECODE_TOKENS_PER_S": "10", "SGLANG_SIM_TICK_S": "0.01"})
    server.wait_ready()

    events = stream(server.port, "/generate", {"text": "x" * 20, "sampling_params": {"max_new_tokens": 30}})
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    chunks = events[:-1]
    counts = [chunk["meta_info"]["completion_tokens"] for chunk in chunks]
    assert len(chunks) > 3 and counts == sorted(set(counts)) and counts[-1] == 30
    for chunk, count in zip(chunks, counts):  # cumulative text and ids
        assert len(chunk["output_ids"]) == count and chunks[-1]["text"].startswith(chunk["text"])
    assert [chunk["meta_info"]["finish_reason"] for chunk in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 30}

    events = stream(server.port, "/v1/completions", {"prompt": "hello", "max_tokens": 20,
                                                     "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    *deltas, usage = events[:-1]
    assert all(chunk["object"] == "text_completion" and chunk["usage"] is None for chunk in deltas)
    assert "".join(chunk["choices"][0]["text"] for chunk in deltas) == post(
        server.port, "/v1/completions", {"prompt": "hello", "max_tokens": 20})[1]["choices"][0]["text"]
    assert [chunk["choices"][0]["finish_reason"] for chunk in deltas][-2:] == [None, "length"]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 1, "completion_tokens": 20,
                                                         "total_tokens": 21, "reasoning_tokens": 0}

    # the probe's way: the running total in every chunk
    events = stream(server.port, "/v1/completions", {"prompt": [7] * 12, "max_tokens": 20, "stream_options": {
        "include_usage": True, "continuous_usage_stats": True}})
    totals = [chunk["usage"]["completion_tokens"] for chunk in events[:-2]]
    assert totals == sorted(set(totals)) and totals[-1] == 20 and len(totals) > 3
    assert all(chunk["usage"]["prompt_tokens"] == 12 for chunk in events[:-2])
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 20

    events = stream(server.port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                          "max_completion_tokens": 9})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]  # no usage chunk unless asked
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(chunk["choices"][0]["delta"]["content"] for chunk in chunks) == \
        " Paris. It is the capital of France Paris"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_admission_limit_queue_and_throughput(launch):
    """8 closed-loop streaming clients on a server that runs 4 requests at a time: 4 run, 4 wait, and the
    server outputs min(8, 4) x 50 tokens/s."""
    rate, max_running, clients, max_new = 50, 4, 8, 50
    server = launch("--enable-metrics", "--max-running-requests", str(max_running), "--decode-log-interval", "10",
                    env={"SGLANG_SIM_DECODE_TOKENS_PER_S": str(rate), "SGLANG_SIM_TICK_S": "0.02"})
    server.wait_ready()
    stop = threading.Event()
    received = []  # (time, tokens), one per token increase a client saw
    lock = threading.Lock()

    def one_request():
        seen = 0

        def on_event(event):
            nonlocal seen
            if event != "[DONE]":
                count = event["meta_info"]["completion_tokens"]
                with lock:
                    received.append((time.monotonic(), count - seen))
                seen = count
        stream(server.port, "/generate", {"text": "x" * 40, "sampling_params": {"max_new_tokens": max_new}}, on_event)

    def client():
        while not stop.is_set():
            one_request()

    threads = [threading.Thread(target=client, daemon=True) for _client in range(clients)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    samples = []
    while time.monotonic() < start + 3.0:
        text = metrics(server)
        samples.append((metric(text, "num_running_reqs"), metric(text, "num_queue_reqs")))
        time.sleep(0.1)
    window = (start + 0.5, start + 3.0)
    lines = decode_lines(server)  # the ones logged while the server was saturated
    stop.set()
    for thread in threads:
        thread.join(10)

    assert all(running <= max_running for running, _queue in samples)
    assert (max_running, clients - max_running) in samples  # as the decode log published it
    assert any(queue > 0 for _running, queue in samples)
    assert len(lines) >= 8
    for _prefix, line in lines:
        running, queue = map(int, re.search(r"#running-req: (\d+), .*#queue-req: (\d+), $", line).groups())
        assert running <= max_running and running + queue <= clients
    throughputs = [float(re.search(r"gen throughput \(token/s\): ([\d.]+)", line).group(1)) for _p, line in lines]
    # gen_throughput counts decode steps: running x rate, once the first window (which began at startup) is past
    assert throughputs[-3:] == pytest.approx([max_running * rate] * 3, rel=0.1)
    tokens = sum(count for at, count in received if window[0] <= at < window[1])
    measured = tokens / (window[1] - window[0])
    # truth: min(concurrency, max_running) x rate (here 4 x 50 = 200; the first token of each request comes
    # with its prefill, so exactly 200 x 50 / 49.0 = 204), within 10 %
    assert measured == pytest.approx(min(clients, max_running) * rate, rel=0.1)


def test_client_gone_mid_stream_frees_its_slot(launch):
    server = launch("--enable-metrics", "--max-running-requests", "1", env={"SGLANG_SIM_DECODE_TOKENS_PER_S": "20"})
    server.wait_ready()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    body = {"text": "hi", "stream": True, "sampling_params": {"max_new_tokens": 1000}}
    connection.request("POST", "/generate", body=json.dumps(body))
    response = connection.getresponse()
    assert response.readline().startswith(b"data: ")
    connection.sock.shutdown(socket.SHUT_RDWR)  # as the probe cuts what is in flight when its window closes
    connection.close()
    started = time.monotonic()
    status, out = post(server.port, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4}})
    assert status == 200 and out["meta_info"]["completion_tokens"] == 4
    assert time.monotonic() - started < 2  # not 50 s behind the 1000-token request
    assert metric(metrics(server), "num_requests_total") == 2  # the warmup and this one; aborts are not served


def test_time_to_first_token_is_queue_wait_plus_prefill(launch):
    server = launch("--max-running-requests", "1", env={"SGLANG_SIM_DECODE_TOKENS_PER_S": "50",
                                                        "SGLANG_SIM_PREFILL_TOKENS_PER_S": "1000",
                                                        "SGLANG_SIM_TICK_S": "0.02"})
    server.wait_ready()
    times = {}

    def client(name):
        times[name] = [time.monotonic()]
        stream(server.port, "/generate", {"input_ids": [1] * 200, "sampling_params": {"max_new_tokens": 10}},
               lambda event: times[name].append(time.monotonic()))

    first = threading.Thread(target=client, args=("first",))
    first.start()
    time.sleep(0.05)
    client("second")  # queued behind the first
    first.join()
    prefill, decode = 200 / 1000, 9 / 50
    sent, first_token, *_rest, done = times["first"]
    # Lower bounds are the model (no token before its prefill, none of the second before the first is done and its
    # own prefill ran); the upper ones only keep a loaded machine's scheduling delays from failing it.
    slack = 1.0
    assert prefill - 0.01 <= first_token - sent <= prefill + slack
    assert prefill + decode - 0.01 <= done - sent <= prefill + decode + slack
    second_first_token = times["second"][1]
    assert done + prefill - 0.01 <= second_first_token <= done + prefill + slack


def test_kv_pool_limits_admission(launch):
    """A 1000-token pool holds 3 requests of 100 + 200 tokens, whatever max_running_requests allows."""
    server = launch("--enable-metrics", "--max-total-tokens", "1000", "--decode-log-interval", "5",
                    env={"SGLANG_SIM_DECODE_TOKENS_PER_S": "200"})
    server.wait_ready()
    info = json.loads(server.get("/server_info")[1])
    assert info["max_total_num_tokens"] == 1000 and info["max_running_requests"] > 6
    body = {"input_ids": [1] * 100, "sampling_params": {"max_new_tokens": 200}}
    threads = [threading.Thread(target=post, args=(server.port, "/generate", body)) for _client in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for _prefix, line in decode_lines(server):
        running, used = map(int, re.search(r"#running-req: (\d+), #token: (\d+), ", line).groups())
        assert running <= 3 and used <= 3 * 300
    assert any("#running-req: 3, " in line and "#queue-req: 3, " in line for _prefix, line in decode_lines(server))
    assert metric(metrics(server), "num_requests_total") == 1 + 6
    # the pool bounds a request: the input is refused, the output trimmed
    assert post(server.port, "/generate", {"input_ids": [1] * 999}) == (400, {"error": {"message": (
        "Input length (999) exceeds the maximum allowed length (999). Use a shorter input or enable "
        "--allow-auto-truncate.")}})
    _status, out = post(server.port, "/generate", {"input_ids": [1] * 900, "sampling_params": {"max_new_tokens": 500}})
    assert out["meta_info"]["completion_tokens"] == 999 - 900 - 1


@pytest.mark.parametrize("flags, version, running", [
    ((), "0.5.9", 53),  # auto -> no_buffer: 3 slots a request
    (("--mamba-scheduler-strategy", "no_buffer"), "0.5.9", 53),
    (("--mamba-scheduler-strategy", "extra_buffer"), "0.5.9", 32),  # + 2 ping-pong slots
    (("--mamba-scheduler-strategy", "extra_buffer", "--disable-overlap-schedule"), "0.5.9", 40),  # + 1
    (("--disable-radix-cache",), "0.5.9", 160),  # nothing cached: 1 slot
    (("--mamba-radix-cache-strategy", "extra_buffer"), "0.5.23", 32),  # v0.5.23's name for the flag
    (("--max-running-requests", "20"), "0.5.9", 20),  # the user's value when it is lower
])
def test_mamba_strategy_sets_max_running_requests(launch, flags, version, running):
    server = launch("--max-mamba-cache-size", "160", "--disable-cuda-graph", *flags, version=version)
    server.wait_ready()
    info = json.loads(server.get("/server_info")[1])
    assert (info["max_mamba_cache_size"], info["max_running_requests"]) == (160, running)
    assert re.search(rf"\] max_total_num_tokens=\d+, .*, max_running_requests={running}, ", server.log())


def test_disabled_radix_cache_sizes_the_mamba_cache_by_max_running_requests(launch):
    server = launch("--disable-radix-cache", "--max-running-requests", "24", "--disable-cuda-graph")
    server.wait_ready()
    info = json.loads(server.get("/server_info")[1])
    assert (info["max_mamba_cache_size"], info["max_running_requests"]) == (24, 24)
    assert "Mamba Cache is allocated. max_mamba_cache_size: 24, " in server.log()


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_hybrid_metrics_under_load_and_when_idle(launch, version):
    """30 mamba slots, no_buffer: 10 running requests fill them, so mamba_usage reads 1.0 (and token_usage from v0.5.10);
    the idle refresh then zeroes the KV side and leaves mamba_usage at its last busy value."""
    # auto is no_buffer up to 0.5.10; from 0.5.23 only with the overlap schedule off (else extra_buffer).
    no_buffer = ("--disable-overlap-schedule",) if version == "0.5.23" else ()
    server = launch("--enable-metrics", "--max-mamba-cache-size", "30", "--decode-log-interval", "10", *no_buffer,
                    version=version, env={"SGLANG_SIM_DECODE_TOKENS_PER_S": "100",
                                          "SGLANG_SIM_IDLE_REFRESH_S": "0.5"})
    server.wait_ready()
    text = metrics(server)
    assert metric(text, "token_usage") == metric(text, "mamba_usage") == metric(text, "num_running_reqs") == 0
    # Requests of 3 s: all 10 run at once even when a loaded machine starts the clients late.
    body = {"text": "x" * 400, "sampling_params": {"max_new_tokens": 300}}
    threads = [threading.Thread(target=post, args=(server.port, "/generate", body)) for _client in range(10)]
    for thread in threads:
        thread.start()

    def all_running():
        lines, text = decode_lines(server), metrics(server)
        if lines and "#running-req: 10," in lines[-1][1] and metric(text, "num_running_reqs") == 10:
            return text, lines[-1]
        return None
    busy, (_prefix, line) = wait_for(all_running, timeout=15, what="all 10 requests running, in the log and /metrics")
    for thread in threads:
        thread.join()

    assert metric(busy, "num_running_reqs") == 10 and metric(busy, "num_queue_reqs") == 0
    assert metric(busy, "mamba_usage") == 1.0  # 10 requests x 3 slots / 30
    used, pool = metric(busy, "num_used_tokens"), metric(busy, "max_total_num_tokens")
    # v0.5.10+: the fuller of full KV and mamba; v0.5.9: the KV pool alone.
    assert metric(busy, "token_usage") == (1.0 if version == "0.5.23" else used / pool)
    assert 10 * 100 < used < 10 * (100 + 300)  # prompts + tokens generated so far
    assert metric(busy, "gen_throughput") > 0
    if version == "0.5.23":
        assert metric(busy, "full_token_usage") == used / pool
    else:
        assert "full_token_usage" not in busy
    usage = {"0.5.9": r"#token: \d+, token usage: 0\.\d\d, mamba usage: 1\.00, ",
             "0.5.23": r"#full token: \d+, full token usage: 0\.\d\d, mamba num: 30, mamba usage: 1\.00, "}[version]
    assert re.fullmatch(rf"Decode batch, #running-req: 10, {usage}cuda graph: True, "
                        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0, ", line), line

    def refreshed():
        text = metrics(server)
        return metric(text, "num_running_reqs") == 0 and metric(text, "gen_throughput") == 0 and text
    idle = wait_for(refreshed, timeout=5, what="the idle refresh")
    assert metric(idle, "token_usage") == metric(idle, "num_used_tokens") == metric(idle, "num_queue_reqs") == 0
    # stale, as in SGLang: what the last decode log line of the load published
    last_busy = float(re.search(r"mamba usage: ([\d.]+), ", decode_lines(server)[-1][1]).group(1))
    assert metric(idle, "mamba_usage") == pytest.approx(last_busy, abs=0.005) and last_busy > 0
    assert metric(idle, "num_requests_total") == 11


def test_data_parallel_ranks_schedule_and_report_apart(launch):
    server = launch("--dp-size", "2", "--enable-metrics", "--max-running-requests", "2", "--disable-cuda-graph",
                    "--decode-log-interval", "10", env={"SGLANG_SIM_DECODE_TOKENS_PER_S": "100"})
    server.wait_ready()
    body = {"text": "x" * 40, "sampling_params": {"max_new_tokens": 50}}
    threads = [threading.Thread(target=post, args=(server.port, "/generate", body)) for _client in range(6)]
    for thread in threads:
        thread.start()
    wait_for(lambda: {prefix for prefix, _line in decode_lines(server)} == {" DP0 TP0", " DP1 TP0"}, timeout=5,
             what="decode lines of both ranks")
    busy = metrics(server)
    for thread in threads:
        thread.join()
    for dp_rank in ("0", "1"):  # round robin: 3 requests a rank, 2 run
        assert metric(busy, "num_running_reqs", dp_rank=dp_rank) == 2
        assert metric(busy, "num_queue_reqs", dp_rank=dp_rank) == 1
    assert re.search(r"Decode batch, #running-req: 2, .*cuda graph: False, ", server.log())


def test_api_key_on_generation_routes(launch):
    server = launch("--api-key", "sekrit", env=FAST)
    server.wait_ready()
    bodies = {"/generate": {"text": "hi", "sampling_params": {"max_new_tokens": 2}},
              "/v1/completions": {"prompt": "hi", "max_tokens": 2},
              "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}}
    for path, body in bodies.items():
        assert post(server.port, path, body) == (401, {"error": "Unauthorized"})
        assert post(server.port, path, body, {"Authorization": "Bearer wrong"})[0] == 401
        assert post(server.port, path, body, {"Authorization": "Bearer sekrit"})[0] == 200


def test_sigterm_drains_requests_in_flight(launch):
    server = launch(env={"SGLANG_SIM_DECODE_TOKENS_PER_S": "10"})
    server.wait_ready()
    result = {}
    request = threading.Thread(target=lambda: result.update(reply=post(
        server.port, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 30}})))
    request.start()
    time.sleep(0.2)
    loads = json.loads(server.get("/v1/loads")[1])["loads"]
    assert [(load["dp_rank"], load["num_running_reqs"], load["num_waiting_reqs"]) for load in loads] == [(0, 1, 0)]
    os.kill(server.pid, signal.SIGTERM)
    # The request lasts 3 s: the drain names it however late a loaded machine delivers the signal.
    server.wait_log(r"Gracefully exiting\.\.\. Remaining number of requests 1\. Remaining requests "
                    r"remaining_rids=\['[0-9a-f]{32}'\]\.", timeout=30)
    request.join(30)
    status, out = result["reply"]
    assert status == 200 and out["meta_info"]["completion_tokens"] == 30
    assert server.wait_exit(30) == -signal.SIGKILL
    assert "Remaining number of requests 0. Remaining requests remaining_rids=[]." in server.log()
