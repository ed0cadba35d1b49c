"""Role gpuops.sglang.launch_scripts through real ansible-playbook runs of playbooks/deploy.yml, and the
interface between the roles (settings checked first, the topology expanded once) through the other playbooks.

Each test gets its own simulated 8-GPU host ``simhost`` (local connection) with an inventory under
tmp_path (``sim_host`` fixture of conftest.py).
"""

import json
import os
import re
import stat
import subprocess

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import run_lock

from .conftest import PYTHON, SGLANG_SIM

# A stand-in server command that prints what it was started with, to check quoting end to end.
ECHO_COMMAND = [PYTHON, "-c", "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))"]


def test_values_with_spaces_quotes_and_dollars_reach_the_server_verbatim(sim_host):
    tricky = "a b $HOME 'single' \"double\" `cmd` $(touch pwned) \\"
    result = sim_host.run("deploy", {
        "sglang_gpu_count": 1,
        "sglang_server_command": ECHO_COMMAND,
        "sglang_served_model_name": tricky,
        "sglang_env": {"TRICKY": tricky, "PLAIN": 42},
        "sglang_extra_args": {"chat_template": "{{ '$x' }}", "trust_remote_code": True},
    })
    assert result.rc == 0, result.stdout
    script = sim_host.script("gpu0")
    started = subprocess.run([str(script)], cwd=sim_host.dir, capture_output=True, text=True, check=True)
    seen = json.loads(started.stdout)
    assert seen["argv"][seen["argv"].index("--served-model-name") + 1] == tricky
    assert seen["argv"][-3:] == ["--chat-template", "$x", "--trust-remote-code"]
    assert seen["env"]["TRICKY"] == tricky and seen["env"]["PLAIN"] == "42"
    assert seen["env"]["GPUOPS_SGLANG_SERVER"] == "gpu0" and seen["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert seen["env"]["TORCHINDUCTOR_CACHE_DIR"] == str(sim_host.dir / "cache" / "inductor")
    assert os.path.isdir(sim_host.dir / "cache" / "triton"), "the script creates its cache directories"
    assert not os.path.exists(sim_host.dir / "pwned")


def test_api_key_stays_out_of_output_and_diff(sim_host):
    key = "sk-Very$ecret'Key"
    result = sim_host.run("deploy", {"sglang_gpu_count": 2, "sglang_api_key": key}, json_output=False,
                          args=("--diff", "-vvv"))
    assert result.rc == 0, result.stdout
    assert "--api-key ********" in result.stdout, "the diff is shown, redacted"
    assert key not in result.stdout and key not in result.stderr
    script = sim_host.script("gpu1")
    assert stat.S_IMODE(os.stat(script).st_mode) == 0o700
    assert "--api-key 'sk-Very$ecret'\"'\"'Key'" in script.read_text()

    rotated = sim_host.run("deploy", {"sglang_gpu_count": 2, "sglang_api_key": "new-key"}, json_output=False,
                           args=("--diff",))
    assert rotated.rc == 0 and "changed: [simhost]" in rotated.stdout
    assert key not in rotated.stdout, "the previous key in the diff's before side is redacted too"


def test_an_api_key_with_shell_and_yaml_characters_reaches_the_server_byte_exact_and_is_never_shown(sim_host):
    key = "sk-,'\")} $HOME `id` $(id) second-part"
    result = sim_host.run("deploy", {"sglang_gpu_count": 1, "sglang_server_command": ECHO_COMMAND,
                                     "sglang_api_key": key}, json_output=False, args=("--diff", "-vvv"))
    assert result.rc == 0, result.stdout
    for shown in (result.stdout, result.stderr):
        assert key not in shown and "second-part" not in shown and "$(id)" not in shown
    started = subprocess.run(["sh", str(sim_host.script("gpu0"))], cwd=sim_host.dir, capture_output=True, text=True,
                             check=True)
    seen = json.loads(started.stdout)
    assert seen["argv"][seen["argv"].index("--api-key") + 1] == key
    assert seen["env"]["GPUOPS_SGLANG_STATE_DIR"] == str(sim_host.dir / "state")


@pytest.mark.parametrize("extra_vars, message", [
    ({"sglang_nccl": {"NCCL_NTHREADS": 100}}, "NCCL_NTHREADS='100' is not valid; use one of 64, 128, 256, 512"),
    ({"sglang_servers": [{"name": "a", "port": 31000, "gpus": [0, 1]}, {"name": "b", "port": 31001, "gpus": [1]}]},
     "overlapping GPUs: GPU 1 is used by servers 'a' and 'b'"),
    ({"sglang_servers": [{"name": "a", "port": 31000, "gpus": [0]}, {"name": "b", "port": 31000, "gpus": [1]}]},
     "duplicate port 31000: servers 'a' and 'b'"),
    ({"sglang_servers": [{"name": "tp", "port": 31000, "gpus": [0, 1, 2], "tp_size": 2}]},
     "server 'tp': tp_size=2 x dp_size=1 does not match its 3 GPUs [0, 1, 2]"),
    ({"sglang_servers": [{"name": "far", "port": 31000, "gpus": [8]}]},
     "server 'far': GPU index 8 is beyond the host's GPU count 8 (valid: 0-7)"),
    # The choices of the SGLang the simulated host runs (0.5.23: extra_buffer_lazy too; before it, the unit tests).
    ({"sglang_mamba_scheduler_strategy": "lazy"},
     "mamba_scheduler_strategy 'lazy' is not valid; use one of auto, no_buffer, extra_buffer, extra_buffer_lazy"),
    ({"sglang_model_path": "/nonexistent/model"},
     "required path(s) missing on the host, nothing written: /nonexistent/model"),
    ({"sglang_extra_args": {"tp": 2}}, "extra arg 'tp' abbreviates (argparse prefix) --tp-size"),
    ({"sglang_env": {"GPUOPS_SGLANG_STATE_DIR": "/elsewhere"}},
     "sglang_env: GPUOPS_SGLANG_STATE_DIR is an ownership marker the role sets"),
    ({"sglang_servers": [{"name": "gpu0\n", "port": 31000, "gpus": [0]}]}, "name 'gpu0\\n' must start with"),
])
def test_invalid_settings_fail_naming_the_value_before_anything_is_written(sim_host, extra_vars, message):
    result = sim_host.run("deploy", extra_vars, json_output=False)
    assert result.rc != 0
    assert message in result.stdout
    assert not sim_host.script_dir.exists()


def test_deploy_is_idempotent_and_reports_only_changed_scripts(sim_host):
    # Another run (a relaunch) holds the host: the deploy waits for it, and writes nothing while it holds it.
    state_dir = str(sim_host.dir / "state")
    os.makedirs(state_dir, exist_ok=True)
    holder = {"run_id": "a-relaunch-run", "controller": "another-controller", "controller_pid": 4242, "user": "ops"}
    assert run_lock.try_claim(state_dir, holder, lease_seconds=600) == (True, None)
    held = sim_host.run("deploy", {"relaunch_lock_timeout": 1})
    assert held.rc != 0 and not sim_host.script_dir.exists()
    assert "host held by run a-relaunch-run (user ops on controller another-controller pid 4242" in \
        held.task("Hold the host for this run")[-1]["msg"]
    assert run_lock.release(state_dir, "a-relaunch-run")

    first = sim_host.run("deploy")
    assert first.rc == 0 and first.stats["changed"] == 1
    assert first.task("Write all launch scripts")[0]["changed_scripts"] == [f"gpu{index}" for index in range(8)]
    assert sorted(os.listdir(sim_host.script_dir)) == [f"gpu{index}.sh" for index in range(8)]
    assert first.task("Write all launch scripts")[0]["released"] is True
    assert not os.path.exists(os.path.join(state_dir, run_lock.LEASE_NAME)), "the write gave the host back"

    again = sim_host.run("deploy")
    assert again.rc == 0 and again.stats["changed"] == 0

    check = sim_host.run("deploy", {"sglang_mem_fraction_static": 0.8}, args=("--check",))
    assert check.task("Write all launch scripts")[0]["changed_scripts"] == [f"gpu{index}" for index in range(8)]
    assert "--mem-fraction-static" not in sim_host.script("gpu0").read_text(), "check mode writes nothing"

    servers = [{"name": f"gpu{index}", "port": sim_host.port(index), "gpus": [index]} for index in range(8)]
    servers[5]["mamba_scheduler_strategy"] = "extra_buffer"
    one = sim_host.run("deploy", {"sglang_servers": servers})
    assert one.task("Write all launch scripts")[0]["changed_scripts"] == ["gpu5"]
    # Spelled for the SGLang the host runs (read by the hold): 0.5.23 renamed --mamba-scheduler-strategy.
    assert "--mamba-radix-cache-strategy extra_buffer" in sim_host.script("gpu5").read_text()


def test_tp8_with_pcie_nccl_and_eagle3(sim_host, tmp_path):
    draft = tmp_path / "draft"
    subprocess.run([PYTHON, SGLANG_SIM, "--make-model", str(draft), "--arch", "LlamaForCausalLMEagle3",
                    "--shards", "1", "--weights-gib", "1"], check=True)
    result = sim_host.run("deploy", {
        "sglang_tp_size": 8, "sglang_nccl": "pcie", "sglang_version": "0.5.23",
        "sglang_speculative": {"algorithm": "EAGLE3", "draft_model_path": str(draft), "num_steps": 3,
                               "eagle_topk": 1, "num_draft_tokens": 4},
    })
    assert result.rc == 0, result.stdout
    assert os.listdir(sim_host.script_dir) == ["gpu0-7.sh"]
    text = sim_host.script("gpu0-7").read_text()
    for line in ("export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "export NCCL_PROTO=LL", "export NCCL_ALGO=Ring",
                 "export NCCL_P2P_LEVEL=SYS", "export NCCL_MAX_NCHANNELS=16", "export NCCL_BUFFSIZE=16777216",
                 "export NCCL_NTHREADS=512", "    --tp-size 8 \\", "    --speculative-algorithm EAGLE3 \\",
                 f"    --speculative-draft-model-path {draft} \\", "    --speculative-num-draft-tokens 4"):
        assert line in text.splitlines()


@pytest.mark.parametrize("playbook, extra_args, message", [
    # -e passes strings: "-5" is a number to the argument spec, and out of range to the option check.
    ("relaunch", ("-e", "relaunch_stall_timeout=-5"),
     "relaunch_stall_timeout=-5 is out of range: use 1-86400 s, or 0 to turn it off"),
    ("relaunch", ("-e", "relaunch_batch_size=5000"), "relaunch_batch_size=5000 is out of range: use 0-4096"),
    ("stop", ("-e", "relaunch_gpu_free_timeout=4000"), "relaunch_gpu_free_timeout=4000 is out of range: use 0-3600 s"),
    # The role's argument spec refuses it first, naming it too.
    ("relaunch", ("-e", "relaunch_progress_interval=abc"), "argument 'relaunch_progress_interval' is of type str"),
    # Not in the deploy role's argument spec: the option check names it.
    ("deploy", ("-e", "relaunch_progress_interval=abc"),
     "relaunch_progress_interval must be a number (0.1-600 s), got 'abc'"),
    # The shared settings' types are checked by role gpuops.sglang.settings, whichever entry point runs.
    ("stop", ("-e", "sglang_gpu_count=abc"), "argument 'sglang_gpu_count' is of type str"),
    ("status", ("-e", "sglang_nvidia_smi_timeout=abc"), "argument 'sglang_nvidia_smi_timeout' is of type str"),
])
def test_bad_numbers_fail_before_the_host_is_touched(sim_host, playbook, extra_args, message):
    result = sim_host.run(playbook, args=extra_args)
    assert result.rc != 0
    failed = [host_result["msg"] for _name, host_result, _duration in result.tasks() if host_result.get("failed")]
    assert len(failed) == 1 and message in failed[0], failed
    assert result.module_calls() == [], "no module ran on the host"
    assert not sim_host.script_dir.exists() and not sim_host.log_dir.exists()


def test_every_problem_of_settings_and_servers_is_named_on_deploy(sim_host):
    result = sim_host.run("deploy", {"sglang_mem_fraction_static": 1.0,
                                     "sglang_speculative": {"algorithm": "NGRAM", "num_steps": 0}}, json_output=False)
    assert result.rc != 0
    assert "sglang_mem_fraction_static=1 is out of range: use 0-1 (exclusive)" in result.stdout
    assert "sglang_speculative.num_steps=0 is out of range: use 1-64" in result.stdout

    servers = [{"name": "a", "port": 31000, "gpus": [0], "mem_fraction": 0.8, "env": ["X=1"]}]
    typo = sim_host.run("deploy", {"sglang_servers": servers}, json_output=False)
    assert typo.rc != 0
    assert "server 'a': unknown key 'mem_fraction'; did you mean 'mem_fraction_static'?" in typo.stdout
    assert "server 'a': env must be a dict, got a list" in typo.stdout
    assert "Traceback" not in result.stdout + result.stderr + typo.stdout + typo.stderr
    assert not sim_host.script_dir.exists()


def test_a_relaunch_expands_the_topology_once_and_publishes_it_as_one_fact(sim_host):
    result = sim_host.run("relaunch", {"sglang_gpu_count": 2}, args=("--check",))
    assert result.rc == 0, result.stdout
    expansions = [host["ansible_facts"]["launch_scripts_servers"] for _name, host, _duration in result.tasks()
                  if "launch_scripts_servers" in host.get("ansible_facts", {})]
    assert len(expansions) == 1, "one expansion per run"
    assert [(server["name"], server["port"], server["gpus"], server["launch_script"], server["log_path"])
            for server in expansions[0]] == [
        (f"gpu{index}", sim_host.port(index), [index], str(sim_host.script(f"gpu{index}")),
         str(sim_host.log_dir / f"gpu{index}.log")) for index in range(2)]
    # After the hold's GPU report only the GPU indexes are checked, against the 8 GPUs the host reported.
    [checked] = result.task("GPU indexes against the host")
    assert checked["action"] == "ansible.builtin.assert" and not checked.get("failed")
    # Check mode holds nothing, but reads what a run reads first: the GPUs and the SGLang installed. Both calls found
    # the fake GPUs: the options of group gpuops.sglang.gpu (the fake nvidia-smi and device directories) reached
    # them through the role's module_defaults.
    assert result.module_calls() == ["gpuops.sglang.host_lock", "gpuops.sglang.server"]
    [hold] = [task for task in result.task("Hold the host") if task.get("action") == "gpuops.sglang.host_lock"]
    assert hold["held"] is False and "run_id" not in hold and len(hold["gpus"]) == 8
    assert hold["sglang"][0]["interpreter"] == sim_host.host_vars["sglang_server_command"][0]
    assert not (sim_host.dir / "state" / "run.json").exists(), "nothing held"
    [server] = result.task("Bring servers")
    assert {entry["name"]: entry["action"] for entry in server["servers"]} == {"gpu0": "launched", "gpu1": "launched"}


def test_a_misspelled_variable_is_named_with_the_closest_one_and_fails_the_run_when_strict(sim_host):
    typo = sim_host.run("deploy", args=("-e", "sglang_tp_szie=2", "--check"), json_output=False)
    assert typo.rc == 0, typo
    warning = "sglang_tp_szie is not a variable of gpuops.sglang, so it does nothing (did you mean sglang_tp_size?)"
    assert warning in " ".join((typo.stdout + typo.stderr).split()), typo.stdout + typo.stderr
    strict = sim_host.run("deploy", args=("-e", "sglang_tp_szie=2", "-e", "relaunch_strict_vars=true"))
    assert strict.rc != 0
    [failed] = [result["msg"] for _name, result, _duration in strict.tasks() if result.get("failed")]
    assert failed == [warning + "; relaunch_strict_vars is true"]
    assert strict.module_calls() == [], "refused before any module ran on the host"


def test_the_summary_table_is_printed_one_row_a_line_by_the_repository_callback_settings(sim_host):
    # ansible.cfg's YAML results broke lines past 80 columns at a single space: the headline and every sentence.
    assert sim_host.run("deploy", {"sglang_gpu_count": 1}).rc == 0
    result = sim_host.run("relaunch", {"sglang_gpu_count": 1, "sglang_mem_fraction_static": 0.5}, json_output=False,
                          args=("--check",))
    assert result.rc == 0, result.stdout
    assert re.search(r"^    - 'check mode, nothing done: would launch 1 \(gpu0\): --mem-fraction-static \S+ -> 0.5; 0 "
                     r"unchanged'$", result.stdout, re.MULTILINE), result.stdout[-3000:]
    header = r"^    - server +gpus +port +action +outcome +failed_in +ready_s +max_total_num_tokens +max_running_requests$"
    assert re.search(header, result.stdout, re.MULTILINE)
    assert re.search(r"^    - gpu0 +0 +\d+ +launched +would launch +- +- +- +-$", result.stdout, re.MULTILINE)


@pytest.mark.parametrize("value, sentence", [
    ("3", ("gpu_count=8 cannot be split into servers of tp_size*dp_size=3 GPUs; use a tp_size*dp_size that divides "
           "the GPU count")),  # a filter's refusal inside set_fact
    ("0", "sglang_tp_size=0 is out of range: use 1-1024"),  # an assert
    ("abc", "argument 'sglang_tp_size' is of type str and we were unable to convert to int"),  # the argument spec
])
def test_a_refusal_reaches_the_operator_once_as_its_own_sentence(sim_host, value, sentence):
    # Through the repository's stdout callback (gpuops.sglang.operator), as an operator runs it.
    result = sim_host.run("relaunch", args=("-e", f"sglang_tp_size={value}"), json_output=False)
    assert result.rc != 0
    output = result.stdout + result.stderr
    assert output.count(sentence) == 1, output
    for wrapper in ("[ERROR]", "Task failed", "Finalization of task args", "The filter plugin", "argument_spec_data",
                    "evaluated_to", "failed_when"):
        assert wrapper not in output, (wrapper, output)
    # The argument spec's failure was 216 lines of output, most of them the role's whole spec.
    assert len(output.splitlines()) < 40, output
    assert not sim_host.script_dir.exists(), "refused before anything was written"


def test_a_stop_after_a_relaunch_in_the_same_play_gives_the_host_back(sim_host):
    # The relaunch's last wait gave the host back in its own call; the stop after it, a run of its own, must still
    # release its hold at its end (the relaunch's "released" once stood for it and left the lease to expire).
    play = sim_host.dir / "relaunch_then_stop.yml"
    play.write_text(json.dumps([{"hosts": "sglang_hosts", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "gpuops.sglang.relaunch"}},
        {"ansible.builtin.include_role": {"name": "gpuops.sglang.relaunch", "tasks_from": "stop"}}]}]))
    result = sim_host.run(str(play)[:-len(".yml")], {"sglang_gpu_count": 2})
    assert result.rc == 0, result
    holds = [task for task in result.task("Hold the host for this run") if task.get("run_id")]
    assert len(holds) == 2 and holds[0]["run_id"] != holds[1]["run_id"], "two runs, one after the other"
    assert not (sim_host.dir / "state" / "run.json").exists(), "the stop gave the host back"
