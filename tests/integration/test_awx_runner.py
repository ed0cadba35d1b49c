"""The AWX / Automation Controller path: relaunch.yml run by ansible-runner, as AWX runs job templates.

AWX turns every display call outside a callback into a `verbose` job event; the wait action's live progress
lines must arrive that way, while the playbook runs, next to the normal task events.
"""

import os

import ansible_runner

from .conftest import BIN_DIR, REPO_ROOT


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

    waited = [event for event in events if event["event"] == "runner_on_ok"
              and event["event_data"].get("task_action") == "gpuops.sglang.wait"]
    assert len(waited) == 1
    servers = waited[0]["event_data"]["res"]["servers"]
    assert [server["status"] for server in servers] == ["ready", "ready"]
    # The progress lines came before the wait task's result, i.e. while it was still running.
    assert events.index(waited[0]) > min(events.index(event) for event in events
                                         if event["event"] == "verbose" and "simhost:" in event.get("stdout", ""))
