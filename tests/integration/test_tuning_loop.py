"""The tuning loop end to end on a simulated host: run journal, side-by-side summary, history, throughput probe,
capacity advice (issue: close the tuning loop)."""

import http.client
import json
import subprocess
import threading

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import journal

from .conftest import PYTHON, SGLANG_SIM, http_status, install_sglang


def summary(result):
    return result.task("Summary")[0]["msg"]


@pytest.fixture
def hybrid_model(tmp_path):
    """A simulated hybrid Mamba model (Qwen3-Next layout), small weights."""
    path = str(tmp_path / "hybrid")
    subprocess.run([PYTHON, SGLANG_SIM, "--make-model", path, "--arch", "Qwen3NextForCausalLM", "--hybrid-mamba",
                    "--shards", "2", "--weights-gib", "2"], check=True)
    return path


def journal_runs(sim_host):
    """The journal's runs as history reads them: the lines of one run (a canary's batch, then the rest) merged."""
    return journal.runs(journal.read_records(str(sim_host.dir / "state")))


def test_journal_side_by_side_history_and_relative_expectations(sim_host, hybrid_model):
    settings = {"sglang_gpu_count": 2, "sglang_model_path": hybrid_model, "sglang_max_mamba_cache_size": 160,
                "sglang_mamba_scheduler_strategy": "extra_buffer", "sglang_api_key": "sk-journal-secret-0123456789"}
    first = sim_host.run("relaunch", settings)
    assert first.rc == 0, first.stdout
    assert any("no earlier run of this model came up" in line for line in summary(first))

    second = sim_host.run("relaunch", dict(settings, sglang_mamba_scheduler_strategy="no_buffer"))
    assert second.rc == 0, second.stdout
    lines = summary(second)
    compared = [line.strip() for line in lines[lines.index("since the last good run:") + 1:]]
    assert len(compared) == 2 and compared[0].startswith("gpu0 vs run ")
    # The flag as the host's SGLang spells it: the simulated host runs 0.5.23, which renamed --mamba-scheduler-strategy.
    assert "--mamba-radix-cache-strategy extra_buffer -> no_buffer" in compared[0]
    assert "max_running_requests 32 -> 53" in compared[0] and "ready " in compared[0]

    records = journal_runs(sim_host)
    assert [record["job"] for record in records] == ["relaunch", "relaunch"]
    entry = records[1]["servers"]["gpu1"]
    assert entry["action"] == "relaunched" and entry["outcome"] == "ready"
    # no_buffer from 0.5.23 on comes with the overlap schedule off (as SGLang itself set it before).
    assert entry["changed"] == [{"setting": "--disable-overlap-schedule", "before": None, "after": True},
                                {"setting": "--mamba-radix-cache-strategy", "before": "extra_buffer",
                                 "after": "no_buffer"}]
    assert entry["facts"]["max_running_requests"] == 53 and entry["timings"]["ready_s"] > 0
    assert records[1]["by"]["user"] and records[1]["run_id"]
    assert "sk-journal-secret" not in (sim_host.dir / "state" / "journal.jsonl").read_text()

    # A KV pool that shrinks by more than allowed against the last good run fails with both numbers.
    shrunk = sim_host.run("relaunch", dict(settings, sglang_mamba_scheduler_strategy="no_buffer",
                                           sglang_mem_fraction_static=0.5,
                                           relaunch_expect={"max_total_num_tokens": {"max_drop_percent": 10}}))
    assert shrunk.rc != 0
    failure = " ".join(shrunk.task("relaunch_expect")[0]["msg"])
    assert "gpu0: max_total_num_tokens=" in failure and "dropped" in failure and "at most 10 % allowed" in failure

    # A new tp_size merges the two servers into one: the summary names the servers it stopped and their scripts,
    # and does not claim the model never ran here.
    merged_settings = dict(settings, sglang_mamba_scheduler_strategy="no_buffer", sglang_tp_size=2)
    merged = sim_host.run("relaunch", merged_settings)
    assert merged.rc == 0, merged.stdout
    lines = summary(merged)
    assert (f"stopped 2 servers no longer in the topology: gpu0, gpu1; their launch scripts stay: "
            f"{sim_host.script('gpu0')}, {sim_host.script('gpu1')}") in lines, lines
    assert ("gpu0-1: first run of this model under this name on these GPUs; it came up here before as gpu0, gpu1 "
            "(nothing to compare)") in [line.strip() for line in lines], lines
    # Renamed on the same GPUs: compared with what ran under the old name.
    renamed = sim_host.run("relaunch", dict(merged_settings, sglang_servers=[
        {"name": "main", "port": sim_host.port(0), "gpus": [0, 1], "tp_size": 2}]))
    assert renamed.rc == 0, renamed.stdout
    lines = [line.strip() for line in summary(renamed)]
    assert any(line.startswith("stopped 1 server no longer in the topology: gpu0-1") for line in lines), lines
    [compared] = [line for line in lines if line.startswith("main vs ")]
    assert compared.startswith("main vs gpu0-1 (the same model on the same GPUs) in run "), compared
    assert "ready " in compared, "its startup compared with the old name's"

    status = sim_host.run("status", dict(merged_settings, sglang_servers=[
        {"name": "main", "port": sim_host.port(0), "gpus": [0, 1], "tp_size": 2}]))
    assert status.rc == 0
    stop = sim_host.run("stop", dict(merged_settings, sglang_servers=[
        {"name": "main", "port": sim_host.port(0), "gpus": [0, 1], "tp_size": 2}]))
    assert stop.rc == 0

    history = sim_host.run("history", {"relaunch_history_last": 10})
    assert history.rc == 0, history.stdout
    table = history.task("Run history")[0]["msg"]
    assert table[0].split()[:3] == ["time", "job", "run"]
    jobs = [line.split()[2] for line in table[1:]]
    assert jobs == ["relaunch"] * 5 + ["status", "stop"]
    assert "--mamba-radix-cache-strategy" in table[2]
    runs = history.task("Publish the runs")[0]["ansible_facts"]["relaunch_history"]
    assert runs[2]["servers"]["gpu0"]["outcome"] == "ready"


# The simulator's truth (tests/simulator/sglang_sim.py): a saturated server outputs
# max_running_requests x SGLANG_SIM_DECODE_TOKENS_PER_S tokens/s; below saturation concurrency x that rate.
DECODE_TOKENS_PER_S = 40
TOLERANCE = 0.15


def probed(result):
    [probe] = result.task("Probe the throughput")
    assert probe.get("servers"), probe
    return probe


def test_an_upgrade_of_the_hosts_sglang_is_rendered_for_and_said_since_the_last_good_run(sim_host, hybrid_model):
    interpreter = sim_host.host_vars["sglang_server_command"][0]
    settings = {"sglang_gpu_count": 1, "sglang_model_path": hybrid_model, "sglang_mamba_scheduler_strategy": "extra_buffer"}
    install_sglang(sim_host.site, "0.5.10")
    assert sim_host.run("relaunch", settings).rc == 0
    assert "--mamba-scheduler-strategy extra_buffer" in sim_host.script("gpu0").read_text()

    install_sglang(sim_host.site, "0.5.23")  # pip install -U sglang on the host, sglang_version unset
    status = sim_host.run("status", settings)
    assert status.rc == 0
    assert ("gpu0 runs SGLang 0.5.10, not the 0.5.23 installed now: a restart starts 0.5.23 (relaunch_state: "
            "restarted)") in status.task("Fleet status")[0]["msg"]
    upgraded = sim_host.run("relaunch", settings)
    assert upgraded.rc == 0, summary(upgraded)
    script = sim_host.script("gpu0").read_text()
    assert "--mamba-radix-cache-strategy extra_buffer" in script and "--mamba-scheduler-strategy" not in script
    lines = summary(upgraded)
    assert lines[1] == f"SGLang 0.5.23 ({interpreter})"
    [compared] = [line for line in lines if line.startswith("  gpu0 vs run ")]
    assert (": SGLang 0.5.10 -> 0.5.23; --mamba-radix-cache-strategy (unset) -> extra_buffer; "
            "--mamba-scheduler-strategy extra_buffer -> (unset); ") in compared
    records = journal_runs(sim_host)
    assert [record["servers"]["gpu0"].get("sglang_version") for record in records if record["job"] == "relaunch"] == [
        "0.5.10", "0.5.23"]
    assert not [line for line in lines if "not the 0.5.23 installed" in line]


def test_probe_measures_known_throughput_and_the_advice_closes_the_loop(sim_host, hybrid_model):
    settings = {"sglang_gpu_count": 2, "sglang_model_path": hybrid_model, "sglang_max_mamba_cache_size": 160,
                "sglang_mamba_scheduler_strategy": "extra_buffer", "sglang_enable_metrics": True,
                "relaunch_probe": {"concurrency": 48, "duration_s": 6, "input_len": 128, "output_len": 48},
                # One probe per run, of both servers (a canary would be probed on its own first).
                "relaunch_canary": 0}
    first = sim_host.run("relaunch", settings)
    assert first.rc == 0, first.stdout
    probe = probed(first)
    for server in probe["servers"]:
        # extra_buffer: 5 mamba slots per running request, 160 // 5 = 32 run at once, 16 queue.
        assert server["status"] == "probed" and server["errors"] == 0, server["error_examples"]
        assert server["output_tok_s"] == pytest.approx(32 * DECODE_TOKENS_PER_S, rel=TOLERANCE), server
        assert server["ttft_p90_s"] > server["ttft_p50_s"] > 0, "the queued requests wait for their first token"
        assert server["capacity"]["bound"] == "mamba", json.dumps(server["capacity"])
        assert "no_buffer" in server["capacity"]["advice"]
    assert probe["host"]["output_tok_s"] == pytest.approx(2 * 32 * DECODE_TOKENS_PER_S, rel=TOLERANCE)
    assert probe["released"] is True, "the probe, the run's last call, gave the host back"
    lines = summary(first)
    assert any(line.startswith("throughput probe (2 servers") for line in lines)
    assert any(line.startswith("gpu0 ") and "mamba pool bound" in line for line in lines)

    # The advice applied: no_buffer needs 3 slots per request, 53 run at once, all 48 requests of the probe.
    second = sim_host.run("relaunch", dict(settings, sglang_mamba_scheduler_strategy="no_buffer"))
    assert second.rc == 0, second.stdout
    for server in probed(second)["servers"]:
        assert server["output_tok_s"] == pytest.approx(48 * DECODE_TOKENS_PER_S, rel=TOLERANCE), server
        assert server["since_last_good"]["probe"]["output_tok_s"]["before"] == pytest.approx(
            32 * DECODE_TOKENS_PER_S, rel=TOLERANCE)
    lines = summary(second)
    compared = next(line for line in lines if line.strip().startswith("gpu0 vs run "))
    assert "max_running_requests 32 -> 53" in compared
    assert any(line.startswith("gpu0 ") and "% vs " in line for line in lines), "the probe's delta is shown"
    probe_lines = [json.loads(line) for line in (sim_host.dir / "state" / "journal.jsonl").read_text().splitlines()
                   if '"job":"probe"' in line]
    assert len(probe_lines) == 2 and probe_lines[1]["servers"]["gpu1"]["probe"]["concurrency"] == 48

    # A regression guard on the probe's own figure: the throughput may not drop more than 5 %.
    worse = sim_host.run("relaunch", dict(settings, relaunch_expect={"output_tok_s": {"max_drop_percent": 5}}))
    assert worse.rc != 0
    assert "output_tok_s=" in " ".join(worse.task("relaunch_expect")[0]["msg"])


def test_probe_refuses_servers_that_are_not_ours(ansible, host_args, make_server, launched, tmp_path):
    ours = make_server("gpu0", [0])
    launched(ours)
    stranger = make_server("other", [1])
    foreign = subprocess.Popen([stranger["launch_script"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        state_dir = {"state_dir": host_args["state_dir"]}
        result = ansible.module("gpuops.sglang.probe", dict(state_dir, servers=[
            {"name": "gpu0"}, {"name": "other", "port": stranger["port"]}], duration=1, concurrency=2,
            input_len=8, output_len=4))
        assert not result.get("failed"), result.get("msg")
        statuses = {server["name"]: server["status"] for server in result["servers"]}
        assert statuses == {"gpu0": "probed", "other": "refused"}
        assert "no state file" in result["refused"][0]["error"]
        alone = ansible.module("gpuops.sglang.probe", dict(state_dir, servers=[
            {"name": "other", "port": stranger["port"]}], duration=1))
        assert alone["failed"] and alone["msg"].startswith("no server to probe: other not probed")
        bad = ansible.module("gpuops.sglang.probe", dict(state_dir, servers=[{"name": "gpu0"}], duration=-1))
        assert bad["failed"] and "duration" in bad["msg"]
    finally:
        foreign.kill()


def _stream(port, max_new_tokens):
    """One streaming /generate request read to its end (the load status.yml looks at)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"input_ids": [7] * 64, "stream": True, "sampling_params": {"max_new_tokens": max_new_tokens}}
    connection.request("POST", "/generate", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    while response.readline():
        pass
    connection.close()


def _gauge(port, name):
    """The value of gauge ``sglang:<name>`` on the server's /metrics (None when absent)."""
    status, text = http_status(port, "/metrics")
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if status == 200 and line.startswith(f"sglang:{name}{{")]
    return values[0] if values else None


def test_status_names_the_binding_constraint_under_load(sim_host, hybrid_model, wait_until):
    settings = {"sglang_gpu_count": 1, "sglang_model_path": hybrid_model, "sglang_max_mamba_cache_size": 160,
                "sglang_mamba_scheduler_strategy": "extra_buffer", "sglang_enable_metrics": True}
    assert sim_host.run("relaunch", settings).rc == 0
    idle = sim_host.run("status", settings)
    assert idle.task("Fleet status")[0]["msg"][-1].startswith("gpu0: idle: 0 running, queue 0")

    # 40 requests of 30 s each: 32 run (the mamba pool's limit), 8 wait, for longer than status.yml takes.
    clients = [threading.Thread(target=_stream, args=(sim_host.port(0), 1200), daemon=True) for _client in range(40)]
    for client in clients:
        client.start()
    # SGLang publishes the gauges when it logs a decode batch: until then /metrics still shows the idle server.
    wait_until(lambda: _gauge(sim_host.port(0), "num_queue_reqs") == 8, timeout=30,
               what="the gauges showing 32 running and 8 waiting")
    busy = sim_host.run("status", settings)
    assert busy.rc == 0
    assert busy.task("Fleet status")[0]["msg"][-1] == (
        # SGLang 0.5.23 (the simulated host's): the KV pool's own gauge, and no_buffer in its spelling, which
        # asserts the overlap schedule off.
        "gpu0: mamba pool bound: mamba_usage 1.00 vs full_token_usage 0.00, 32 running = max_running_requests, queue 8: "
        "try `--mamba-radix-cache-strategy no_buffer --disable-overlap-schedule` or a larger `--max-mamba-cache-size`")
    record = json.loads((sim_host.dir / "state" / "journal.jsonl").read_text().splitlines()[-1])
    assert record["job"] == "status" and record["servers"]["gpu0"]["capacity"]["bound"] == "mamba"
    assert record["by"]["user"], "a status run says who ran it"
