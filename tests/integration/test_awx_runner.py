"""The AWX / Automation Controller path: the playbooks run by ansible-runner, as AWX runs job templates.

AWX turns every display call outside a callback into a `verbose` job event; the wait action's live progress
lines must arrive that way, while the playbook runs, next to the normal task events. The later tests lay out
the private data dir as AWX does for a job (env/extravars with the survey answers and the injected API key, strings
marked !unsafe as AWX writes launch-time variables, env/settings with idle_timeout and job_timeout, env/envvars,
inventory/, project/) and run it unchanged; a canceled job is killed as AWX kills it (ansible-runner's cancel).
"""

import copy
import json
import os
import threading

import ansible_runner
import yaml

from .conftest import BIN_DIR, REPO_ROOT, FakeGpuHost, SimHost, http_status
from .test_multinode import TwoNodes

API_KEY = "sk-awx-Zq8Wm3Vt7Rb2Lp9X"
SURVEY_DIR = os.path.join(REPO_ROOT, "meta", "awx", "surveys")


class UnsafeDumper(yaml.SafeDumper):
    """Every string as ``!unsafe``: AWX writes launch-time variables so (ALLOW_JINJA_IN_EXTRA_VARS: template)."""

    def represent_str(self, data):
        return self.represent_scalar("!unsafe", data)


UnsafeDumper.add_representer(str, UnsafeDumper.represent_str)


def awx_extravars(variables):
    """env/extravars as AWX writes it: one YAML document per variable, its strings never templated."""
    return "".join(yaml.dump({name: value}, Dumper=UnsafeDumper, default_flow_style=False)
                   for name, value in variables.items())


def survey_answers(survey, **answers):
    """The extra vars AWX makes of a survey's answers: defaults for the questions not answered, empty optional
    questions left out; only questions of the survey may be answered."""
    with open(os.path.join(SURVEY_DIR, survey)) as handle:
        questions = json.load(handle)["spec"]
    variables = {}
    for question in questions:
        value = answers.pop(question["variable"], question.get("default", ""))
        if value != "" or question["required"]:
            variables[question["variable"]] = value
    assert not answers, f"{survey} does not ask for {sorted(answers)}"
    return variables


def survey_choice(survey, variable, meaning):
    """The choice of a true/false question that means ``meaning``, as the survey offers it."""
    with open(os.path.join(SURVEY_DIR, survey)) as handle:
        question = next(question for question in json.load(handle)["spec"] if question["variable"] == variable)
    return next(choice for choice in question["choices"] if yaml.safe_load(choice) is meaning)


def test_relaunch_through_ansible_runner_streams_progress_as_verbose_events(sim_host, tmp_path, monkeypatch):
    # ansible-runner finds ansible-playbook on PATH, as in an execution environment.
    monkeypatch.setenv("PATH", BIN_DIR + os.pathsep + os.environ["PATH"])
    events = []
    private_data_dir = tmp_path / "runner"
    private_data_dir.mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(private_data_dir),
        project_dir=REPO_ROOT,
        playbook="playbooks/relaunch.yml",
        inventory=str(sim_host.inventory),
        extravars={"sglang_gpu_count": 2},
        envvars={key: value for key, value in sim_host.env.items()
                 if key.startswith(("ANSIBLE_", "GPUOPS_"))},
        event_handler=lambda event: events.append(event) or True,
        quiet=True,
        timeout=300,
    )
    assert runner.status == "successful", "\n".join(event.get("stdout", "") for event in events[-30:])

    progress = [event["stdout"] for event in events
                if event["event"] == "verbose" and "simhost:" in event.get("stdout", "")]
    assert progress, "no live progress line reached the job events"
    assert any("2/2 ready" in line for line in progress), progress

    # A relaunch is one module call: the hold, which waited too.
    waited = hold_waits(events)
    assert len(waited) == 1
    servers = waited[0]["event_data"]["res"]["converged"]["wait"]["servers"]
    assert [server["status"] for server in servers] == ["ready", "ready"]
    # The progress lines came before the hold task's result, i.e. while it was still running.
    assert events.index(waited[0]) > min(events.index(event) for event in events
                                         if event["event"] == "verbose" and "simhost:" in event.get("stdout", ""))


def hold_waits(events):
    """The ok events of a hold that waited in its own call (a relaunch in one module call)."""
    return [event for event in events if event["event"] == "runner_on_ok"
            and event["event_data"].get("task_action") == "gpuops.sglang.host_lock"
            and event["event_data"]["res"].get("converged", {}).get("wait")]


class AwxJob:
    """One AWX-style job: a private data dir as AWX writes it, run by ansible-runner in a thread."""

    def __init__(self, sim_host, tmp_path, job_id, playbook, answers, idle_timeout=60, job_timeout=300,
                 host_vars=None, inventory=None):
        self.job_id = job_id
        self.dir = tmp_path / f"awx-job-{job_id}"
        (self.dir / "env").mkdir(parents=True)
        (self.dir / "inventory").mkdir()
        # AWX syncs the project into project/; the checkout itself stands in for it.
        os.symlink(REPO_ROOT, self.dir / "project")
        # The inventory, where settings no survey asks for live (host_vars: more of them); ``inventory``: another one
        # (a slice's).
        inventory = inventory or yaml.safe_load(sim_host.inventory.read_text())
        inventory["all"]["children"]["sglang_hosts"]["hosts"][sim_host.name].update(host_vars or {})
        (self.dir / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory))
        # Survey answers, the credential's injected extra var and AWX's own job variables, as AWX writes them.
        extravars = {"awx_job_id": job_id, "tower_job_id": job_id, "awx_job_template_name": "sglang relaunch",
                     "sglang_api_key": API_KEY, **answers}
        (self.dir / "env" / "extravars").write_text(awx_extravars(extravars))
        (self.dir / "env" / "settings").write_text(yaml.safe_dump(
            {"idle_timeout": idle_timeout, "job_timeout": job_timeout, "pexpect_timeout": 5,
             "suppress_ansible_output": True}))
        envvars = {key: value for key, value in sim_host.env.items() if key.startswith(("ANSIBLE_", "GPUOPS_"))}
        envvars["PATH"] = BIN_DIR + os.pathsep + os.environ["PATH"]
        (self.dir / "env" / "envvars").write_text(yaml.safe_dump(envvars))
        self.playbook = playbook
        self.events = []
        self.runner = None
        # Set by cancel(): ansible-runner then SIGKILLs ansible-playbook's process group, as for an AWX cancel.
        self.canceled = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self.runner = ansible_runner.run(private_data_dir=str(self.dir), playbook=self.playbook,
                                         ident=str(self.job_id), quiet=True, cancel_callback=self.canceled.is_set,
                                         event_handler=lambda event: self.events.append(event) or True)

    def cancel(self):
        self.canceled.set()
        return self

    def start(self):
        self.thread.start()
        return self

    def join(self, timeout=240):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"AWX job {self.job_id} still running after {timeout} s"
        return self

    def run(self):
        return self.start().join()

    @property
    def status(self):
        return self.runner.status

    def tail(self, count=40):
        return "\n".join(event.get("stdout", "") for event in self.events[-count:])

    def hosts_acted_on(self):
        """The hosts a module ran on in this job."""
        return sorted({event["event_data"]["host"] for event in self.results("runner_on_ok")
                       if event["event_data"].get("task_action", "").startswith("gpuops.sglang.")})

    def results(self, event_type, action=None):
        return [event for event in self.events if event["event"] == event_type
                and (action is None or event["event_data"].get("task_action") == action)]

    def progress(self):
        return [event for event in self.events if event["event"] == "verbose" and "simhost:" in event.get("stdout", "")]

    def waited(self):
        """The events of the hold that relaunched and waited in its one call, each with the wait's answer."""
        return hold_waits(self.events)

    def everything_recorded(self):
        """Every event as JSON, the job's stdout and every artifact file: what AWX stores and shows."""
        texts = [json.dumps(event) for event in self.events]
        for root, _dirs, files in os.walk(self.dir / "artifacts"):
            for name in files:
                with open(os.path.join(root, name), errors="replace") as handle:
                    texts.append(handle.read())
        return "\n".join(texts)


def sim_env(sim_host, **extra):
    """The simulated host's sglang_env with more variables (a survey-free way to slow or break the servers)."""
    return {**sim_host.host_vars["sglang_env"], **extra}


def test_awx_job_streams_progress_beats_idle_timeout_and_never_shows_the_api_key(sim_host, tmp_path):
    # Slower servers than the other tests: the wait lasts several times the idle_timeout, with no task event
    # in between; only the progress lines keep the job alive. (At 1.4 the wait once took only 5.8 s on CI: part
    # of the startup now passes during the server task, which follows its worker in slices.) An idle_timeout of 3 s
    # once ended the job on a loaded 2-core machine between two of the server task's lines: 10 s leaves room for a
    # starved controller, and startups of 36-60 s keep the wait several times longer.
    idle_timeout = 10
    answers = {"relaunch_state": "restarted", "sglang_gpu_count": 2, "relaunch_batch_size": 0,
               "relaunch_wait_timeout": 180, "relaunch_stall_timeout": 120, "relaunch_lock_timeout": 60,
               "relaunch_progress_interval": 0.5,
               "sglang_env": sim_env(sim_host, SGLANG_SIM_TIME_SCALE="12")}
    job = AwxJob(sim_host, tmp_path, 4101, "playbooks/relaunch.yml", answers, idle_timeout=idle_timeout).run()
    assert job.status == "successful", job.tail()

    # The relaunch is one call, the hold: it stops, launches and waits.
    waited = job.waited()
    assert len(waited) == 1 and [server["status"] for server in
                                 waited[0]["event_data"]["res"]["converged"]["wait"]["servers"]] == ["ready", "ready"]
    started = [event for event in job.events if event["event"] == "playbook_on_task_start"
               and event["event_data"].get("task_action") == "gpuops.sglang.host_lock"][:1]
    # Precondition of what this test shows: the hold's task outlived idle_timeout (else it proves nothing).
    assert waited[0]["event_data"]["duration"] > 2 * idle_timeout, waited[0]["event_data"]["duration"]

    # Progress arrived as verbose events between the hold's task start and its result, timestamps included.
    progress = job.progress()
    start_index, ok_index = job.events.index(started[0]), job.events.index(waited[0])
    during = [event for event in progress if start_index < job.events.index(event) < ok_index]
    assert len(during) >= 3, [event["stdout"] for event in progress]
    assert all(event["created"] < waited[0]["created"] for event in during)
    assert any("loading weights" in event["stdout"] or "capturing cuda graph" in event["stdout"]
               for event in during), [event["stdout"] for event in during]

    # The summary is in the final events: after the wait, right before the stats.
    assert job.events[-1]["event"] == "playbook_on_stats"
    summaries = [event for event in job.events[ok_index:] if event["event"] == "runner_on_ok"
                 and "2/2 serving" in json.dumps(event["event_data"].get("res", {}))]
    assert summaries, job.tail()
    assert "2/2 serving" in "\n".join(event.get("stdout", "") for event in job.events[ok_index:])

    # The injected key reached the servers (the wait authenticated) but no event, stdout or artifact shows it.
    assert API_KEY in (sim_host.script_dir / "gpu0.sh").read_text()
    assert API_KEY not in job.everything_recorded()


def test_awx_job_with_a_crashing_server_fails_with_the_traceback(sim_host, tmp_path):
    servers = [{"name": f"s{index}", "port": sim_host.port(index), "gpus": [index]} for index in range(2)]
    servers[1]["env"] = {"SGLANG_SIM_FAULT": "oom_load"}
    answers = {"relaunch_state": "restarted", "sglang_servers": servers, "relaunch_wait_timeout": 60}
    job = AwxJob(sim_host, tmp_path, 4102, "playbooks/relaunch.yml", answers).run()
    assert job.status == "failed", job.tail()

    failed = job.results("runner_on_failed")
    messages = [json.dumps(event["event_data"]["res"].get("msg")) for event in failed]
    crashed = [message for message in messages if "s1 crashed" in message]
    assert crashed, messages
    assert "Traceback" in crashed[0] and "OutOfMemoryError" in crashed[0], crashed[0]
    # The crash is also in the job's stdout as AWX shows it, and the key still in nothing recorded.
    assert "s1 crashed" in "\n".join(event.get("stdout", "") for event in job.events)
    assert API_KEY not in job.everything_recorded()


def _state(sim_host, name):
    return json.loads((sim_host.dir / "state" / f"{name}.json").read_text())


def test_two_awx_jobs_at_once_one_host_never_interleave(sim_host, tmp_path, wait_until):
    # 5001 must still hold the host when the others (each an ansible-runner start, seconds on a loaded machine)
    # ask for it: its servers start slowly, since a relaunch is only one module call.
    slow = {"sglang_gpu_count": 2, "relaunch_state": "restarted",
            "sglang_env": sim_env(sim_host, SGLANG_SIM_TIME_SCALE="4")}
    first = AwxJob(sim_host, tmp_path, 5001, "playbooks/relaunch.yml", slow).start()
    wait_until((sim_host.dir / "state" / "run.json").exists, timeout=60, what="job 5001 to hold the host")
    # Started while 5001 holds the host: one gives up after a second, one waits for the host.
    impatient = AwxJob(sim_host, tmp_path, 5002, "playbooks/relaunch.yml",
                       {**slow, "relaunch_lock_timeout": 1}).start()
    patient = AwxJob(sim_host, tmp_path, 5003, "playbooks/relaunch.yml",
                     {**slow, "relaunch_state": "started", "relaunch_lock_timeout": 120}).start()
    for job in (first, impatient, patient):
        job.join()

    assert first.status == "successful", first.tail()
    launched = {server["name"]: server for server in first.waited()[0]["event_data"]["res"]["converged"]["wait"][
        "servers"]}
    assert set(launched) == {"gpu0", "gpu1"}
    pids = {name: _state(sim_host, name)["pid"] for name in launched}

    # The impatient job failed clearly, naming the job holding the host, and touched no server.
    assert impatient.status == "failed", impatient.tail()
    failures = "\n".join(json.dumps(event["event_data"]["res"].get("msg")) for event in
                         impatient.results("runner_on_failed"))
    assert "AWX job 5001" in failures, failures
    assert not impatient.results("runner_on_ok", "gpuops.sglang.server") and not impatient.waited()
    assert not impatient.results("runner_on_failed", "gpuops.sglang.server")

    # The patient job said who it waited for, then found everything running: nothing killed twice.
    assert patient.status == "successful", patient.tail()
    waiting = [event["stdout"] for event in patient.events if "waiting for the host" in event.get("stdout", "")]
    assert waiting and "AWX job 5001" in waiting[0], patient.tail()
    # Nothing to change: the hold planned every server as the server call would, unchanged, in its one call.
    [planned] = [event["event_data"]["res"]["converged"]["server"]
                 for event in patient.results("runner_on_ok", "gpuops.sglang.host_lock")
                 if event["event_data"]["res"].get("converged")]
    assert not planned["changed"] and {server["action"] for server in planned["servers"]} == {"unchanged"}
    assert not patient.results("runner_on_ok", "gpuops.sglang.server")
    assert {name: _state(sim_host, name)["pid"] for name in launched} == pids
    # One launch per server in all three jobs: a second launch would have rotated the first log away.
    assert not any((sim_host.log_dir / f"{name}.log.1").exists() for name in launched)
    for job in (first, impatient, patient):
        assert API_KEY not in job.everything_recorded()


def test_survey_answers_as_awx_passes_them_reach_the_role(sim_host, tmp_path):
    # Only the survey's questions, answered as AWX passes them: integers, and strings (!unsafe) for the choices -
    # "false" for the rollback must mean false, and one server named must leave the other alone.
    first = AwxJob(sim_host, tmp_path, 4201, "playbooks/relaunch.yml",
                   survey_answers("relaunch.json", relaunch_state="restarted", sglang_gpu_count=2)).run()
    assert first.status == "successful", first.tail()
    pids = {name: _state(sim_host, name)["pid"] for name in ("gpu0", "gpu1")}

    # A flag gpu1 cannot start with, from the inventory (where settings live); the check against the host's SGLang,
    # which would refuse it before anything is touched, off (as for a fork): the server refuses it when it starts.
    answers = survey_answers("relaunch.json", relaunch_state="restarted", sglang_gpu_count=2,
                             relaunch_only_servers="gpu1",
                             relaunch_rollback=survey_choice("relaunch.json", "relaunch_rollback", False))
    assert answers["relaunch_rollback"] == "false" and "relaunch_take_over_run" not in answers
    second = AwxJob(sim_host, tmp_path, 4202, "playbooks/relaunch.yml", answers,
                    host_vars={"sglang_extra_args": {"no_such_flag": True}, "sglang_flag_check": False}).run()
    assert second.status == "failed", second.tail()
    failures = [json.dumps(event["event_data"]["res"].get("msg")) for event in second.results("runner_on_failed")]
    assert any("gpu1 crashed" in failure for failure in failures), failures
    assert not any("rolled back" in failure for failure in failures), failures
    assert not second.results("runner_on_ok", "gpuops.sglang.server")[1:], "no second server call: no rollback"
    assert _state(sim_host, "gpu0")["pid"] == pids["gpu0"], "gpu0 was not named: untouched"
    assert _state(sim_host, "gpu1")["pid"] != pids["gpu1"]


def test_a_canceled_awx_job_keeps_its_hold_until_its_lease_expires_or_is_taken_over(sim_host, tmp_path, wait_until):
    # Wait slices of 1 s. ansible-runner's cancel kills ansible-playbook's process group, but Ansible's workers lead
    # groups of their own: the worker in the wait must stop after its slice in flight, not go on and give the host
    # back once the servers are ready (as the run's last slice does). They load no weights until the gate exists.
    gate = tmp_path / "weights-arrived"
    slow = {"sglang_env": sim_env(sim_host, SGLANG_SIM_WEIGHTS_GATE=str(gate)), "relaunch_progress_interval": 1}
    canceled = AwxJob(sim_host, tmp_path, 4301, "playbooks/relaunch.yml",
                      survey_answers("relaunch.json", relaunch_state="restarted", sglang_gpu_count=2),
                      host_vars=slow).start()
    # The hold stops, launches and waits in its one call: its progress lines say when it waits for the servers.
    wait_until(lambda: any("0/2 ready" in event["stdout"] for event in canceled.progress()), timeout=120,
               what="job 4301 to wait for its servers")
    canceled.cancel().join()
    assert canceled.status == "canceled", canceled.tail()
    assert not canceled.results("runner_on_ok", "gpuops.sglang.host_lock"), "canceled while waiting (else this " \
        "shows nothing)"
    # ansible-playbook was killed: nothing after the hold ran, the `always` that gives the host back included.
    started = [event["event_data"].get("task", "") for event in canceled.results("playbook_on_task_start")]
    assert any(task.endswith("Hold the host for this run") for task in started), started
    assert not any(task.endswith("Release the host") for task in started), started
    lease_path = sim_host.dir / "state" / "run.json"
    lease = json.loads(lease_path.read_text())
    assert lease["awx_job_id"] == "4301"
    pids = {name: _state(sim_host, name)["pid"] for name in ("gpu0", "gpu1")}

    # AWX runs each job in a new execution environment container: the next job's controller has another host
    # name and cannot see that the canceled job's ansible-playbook is gone (this machine could, and would take the
    # hold over at once). So the hold is the dead job's until its lease expires ...
    lease_path.write_text(json.dumps(dict(lease, controller="automation-job-4301-x7k2p")))
    impatient = AwxJob(sim_host, tmp_path, 4302, "playbooks/relaunch.yml",
                       survey_answers("relaunch.json", sglang_gpu_count=2, relaunch_lock_timeout=1),
                       host_vars=slow).run()
    assert impatient.status == "failed", impatient.tail()
    failures = "\n".join(json.dumps(event["event_data"]["res"].get("msg"))
                         for event in impatient.results("runner_on_failed"))
    assert "AWX job 4301" in failures and f"take_over={lease['run_id']}" in failures, failures
    assert not impatient.results("runner_on_ok", "gpuops.sglang.server")

    # The servers it started go on starting (the host's side is detached) and become ready; nobody acts on that.
    gate.touch()
    wait_until(lambda: all(http_status(_state(sim_host, name)["port"], "/ready")[0] == 200 for name in pids),
               timeout=120, what="the canceled job's servers to be ready")
    assert json.loads(lease_path.read_text())["run_id"] == lease["run_id"], "the canceled job's worker went on"

    # ... or an operator who knows it is dead takes it over through the survey: the next job finds the servers it
    # started, relaunches nothing and waits for them.
    taking_over = AwxJob(sim_host, tmp_path, 4303, "playbooks/relaunch.yml",
                         survey_answers("relaunch.json", sglang_gpu_count=2, relaunch_take_over_run=lease["run_id"]),
                         host_vars=slow).run()
    assert taking_over.status == "successful", taking_over.tail()
    [held] = taking_over.results("runner_on_ok", "gpuops.sglang.host_lock")[:1]
    assert held["event_data"]["res"]["taken_over"]["run_id"] == lease["run_id"]
    assert not any(event["event_data"]["res"].get("changed")
                   for event in taking_over.results("runner_on_ok", "gpuops.sglang.server"))
    assert {name: _state(sim_host, name)["pid"] for name in pids} == pids
    assert not lease_path.exists(), "given back at the end"


def awx_slices(hosts, count):
    """The hosts of each job of a template with job_slice_count ``count``: AWX deals an inventory's hosts out round
    robin, in name order (its inventory ``?subset=slice<k>of<count>``)."""
    ordered = sorted(hosts)
    return [ordered[index::count] for index in range(count)]


def sliced_inventory(inventory, hosts):
    """The inventory a slice's job gets: only its hosts; every group and variable as they were."""
    sliced = copy.deepcopy(inventory)
    members = sliced["all"]["children"]["sglang_hosts"]["hosts"]
    for name in set(members) - set(hosts):
        del members[name]
    return sliced


def test_a_sliced_template_relaunches_disjoint_hosts_and_each_job_holds_only_its_own(tmp_path, test_token, model_dir):
    hosts = {name: SimHost(tmp_path, FakeGpuHost(tmp_path / f"gpu-{name}", test_token, count=2), test_token,
                           model_dir, name=name) for name in ("gpu-a", "gpu-b", "gpu-c")}
    inventory = {"all": {"children": {"sglang_hosts": {"hosts": {
        name: host.host_vars for name, host in hosts.items()}}}}}
    slices = awx_slices(hosts, 2)
    assert slices == [["gpu-a", "gpu-c"], ["gpu-b"]]
    # The slices of one launch run at once, each its own job (its own ansible-playbook, inventory and AWX job id).
    jobs = [AwxJob(hosts[names[0]], tmp_path, 6001 + index, "playbooks/relaunch.yml",
                   survey_answers("relaunch.json", sglang_gpu_count=2), inventory=sliced_inventory(inventory, names))
            for index, names in enumerate(slices)]
    for job in [job.start() for job in jobs]:
        job.join()
    for job, names in zip(jobs, slices):
        assert job.status == "successful", job.tail()
        assert job.hosts_acted_on() == names, "a job touches only the hosts of its slice"
        for name in names:
            # Its servers came up, under this job's hold: the run journal names the AWX job that held the host.
            lines = [json.loads(line) for line in (hosts[name].dir / "state" / "journal.jsonl").read_text().splitlines()]
            assert {(line["job"], line["by"].get("awx_job_id")) for line in lines} == {("relaunch", str(job.job_id))}, lines
            assert {server["outcome"] for server in lines[-1]["servers"].values()} == {"ready"}
            assert not (hosts[name].dir / "state" / "run.json").exists(), "each job gave its hosts back"


def test_a_slice_that_would_split_a_multi_node_group_refuses_naming_the_group(tmp_path, test_token, model_dir):
    two_nodes = TwoNodes(tmp_path, test_token, model_dir)
    inventory = yaml.safe_load(two_nodes.hosts["node0"].inventory.read_text())
    slices = awx_slices(two_nodes.hosts, 2)
    jobs = [AwxJob(two_nodes.hosts[names[0]], tmp_path, 6101 + index, "playbooks/relaunch.yml",
                   survey_answers("relaunch.json"), inventory=sliced_inventory(inventory, names))
            for index, names in enumerate(slices)]
    for job in [job.start() for job in jobs]:
        job.join()
    for job, names in zip(jobs, slices):
        assert job.status == "failed", job.tail()
        failures = "\n".join(json.dumps(event["event_data"]["res"].get("msg"))
                             for event in job.results("runner_on_failed"))
        [other] = set(two_nodes.hosts) - set(names)
        assert f"group 'tp8': node '{other}'" in failures and "is not in this play" in failures, failures
        assert job.hosts_acted_on() == [], "refused before any host was touched"
    assert two_nodes.state("node0") is None and two_nodes.state("node1") is None
