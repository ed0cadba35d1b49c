"""The systemd unit a server runs in, rendered from the same settings as the detached launch."""

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.argument_specs import (
    SYSTEMD_OPTIONS,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launchers import (
    LauncherError,
    SystemdLauncher,
    defaults,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    deployment_id,
    legacy_unit_name,
    unit_name,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.systemd_units import (
    render_unit,
    unit_problems,
)

OPTIONS = defaults(SYSTEMD_OPTIONS)


def unit(stop_timeout=30, **options):
    return render_unit("gpu0", "/opt/sglang/gpu0.sh", "/var/log/sglang/gpu0.log", "/var/lib/gpuops-sglang",
                       stop_timeout, dict(OPTIONS, **options))


def directives(content):
    return [line for line in content.splitlines() if "=" in line and not line.startswith("#")]


def test_the_unit_runs_the_launch_script_into_the_same_log_and_owns_every_process():
    content = unit()
    assert unit_name("gpu0", "/var/lib/gpuops-sglang") == f"gpuops-sglang-{deployment_id('/var/lib/gpuops-sglang')}-gpu0.service"
    for line in ("Type=exec", "ExecStart=/opt/sglang/gpu0.sh", "WorkingDirectory=/opt/sglang",
                 "StandardOutput=append:/var/log/sglang/gpu0.log", "StandardError=inherit",
                 "KillMode=control-group", "TimeoutStopSec=30000ms", "Restart=no", "WantedBy=multi-user.target",
                 "Environment=GPUOPS_SGLANG_SERVER=gpu0 GPUOPS_SGLANG_STATE_DIR=/var/lib/gpuops-sglang SPT_NOENV=1"):
        assert line in directives(content)
    assert not any(line.startswith("RestartSec=") for line in directives(content))


def test_a_zero_stop_timeout_is_not_systemds_infinity():
    assert "TimeoutStopSec=1ms" in directives(unit(stop_timeout=0))


def test_restart_on_failure_comes_with_its_delay_and_start_limit():
    content = unit(restart="on-failure", restart_sec=5, start_limit_burst=4, start_limit_interval=120)
    for line in ("Restart=on-failure", "RestartSec=5000ms", "StartLimitBurst=4", "StartLimitIntervalSec=120000ms"):
        assert line in directives(content)


def test_enabling_changes_the_unit_so_the_comparison_sees_it():
    assert unit(enabled=True) != unit(enabled=False)


def test_percent_signs_are_not_taken_for_systemd_specifiers():
    content = render_unit("gpu0", "/opt/100%/gpu0.sh", "/var/log/gpu0.log", "/var/lib/g", 30, OPTIONS)
    assert "ExecStart=/opt/100%%/gpu0.sh" in directives(content)


@pytest.mark.parametrize("path", ["/opt/my scripts/gpu0.sh", "/opt/x'y/gpu0.sh", "/opt/a\\b.sh", "/opt/a;b.sh",
                                  "/opt/$HOME/gpu0.sh", "bin/gpu0.sh"])
def test_paths_a_unit_cannot_hold_are_named(path):
    problems = unit_problems("servers[0] (gpu0)", {"launch_script": path, "log_path": "/var/log/g.log"}, "/var/lib/g")
    assert problems == [(f"servers[0] (gpu0).launch_script {path!r} cannot be used in a systemd unit (an absolute "
                         "path without whitespace, quotes, backslashes, ';' or '$'): choose another path or "
                         "sglang_launcher: detached")]


def test_plain_paths_are_fine():
    assert unit_problems("s", {"launch_script": "/opt/a.sh", "log_path": "/var/log/a.log"}, "/var/lib/g") == []


def test_only_the_units_own_cgroup_counts_never_a_parent(tmp_path):
    # A cgroup v1 hybrid as in an LXC container: processes entered with lxc-attach (this module's worker too) sit
    # in the root of the name=systemd hierarchy; an inactive unit's ControlGroup is empty.
    root = tmp_path / "systemd"
    name = unit_name("gpu0", "/var/lib/g")
    unit = root / "system.slice" / name
    unit.mkdir(parents=True)
    (root / "cgroup.procs").write_text("1\n149\n")
    (root / "system.slice" / "cgroup.procs").write_text("77\n")
    (unit / "cgroup.procs").write_text("60\n89\n")
    launcher = SystemdLauncher(None, OPTIONS, "/var/lib/g", 30, cgroup_roots=(str(tmp_path / "absent"), str(root)))
    assert launcher._cgroup_pids("gpu0", f"/system.slice/{name}") == {60, 89}
    assert launcher._cgroup_pids("gpu0", "") == set()
    assert launcher._cgroup_pids("gpu0", None) == set()
    assert launcher._cgroup_pids("gpu0", "/system.slice") == set()
    assert launcher._cgroup_pids("gpu1", f"/system.slice/{name}") == set()
    # Another deployment's unit of a server gpu0 (the name before deployments, too) is not this one's.
    other = SystemdLauncher(None, OPTIONS, "/var/lib/other", 30, cgroup_roots=(str(root),))
    assert other._cgroup_pids("gpu0", f"/system.slice/{name}") == set()
    assert launcher._cgroup_pids("gpu0", "/system.slice/gpuops-sglang-gpu0.service") == set()


def test_two_deployments_of_a_host_get_two_units_for_their_gpu0():
    first, second = unit_name("gpu0", "/var/lib/gpuops-sglang"), unit_name("gpu0", "/srv/team-b/state")
    assert first != second and first.endswith("-gpu0.service") and second.endswith("-gpu0.service")
    assert unit_name("gpu0", "/var/lib/gpuops-sglang/") == first, "one deployment, however its path is spelled"


class FakeSystemctl:
    """Records the systemctl calls of a launcher instead of running them."""

    def __init__(self, launcher, answers=None):
        self.calls = []
        self.answers = answers or {}  # the first argument -> (rc, stdout)
        launcher._systemctl = self.call

    def call(self, *args, check=True):
        self.calls.append(args)
        return self.answers.get(args[0], (0, ""))


def launcher_with_units(tmp_path, state_dir, units):
    for name, content in units.items():
        (tmp_path / name).write_text(content)
    launcher = SystemdLauncher(None, dict(OPTIONS, unit_dir=str(tmp_path)), state_dir, 30)
    return launcher, FakeSystemctl(launcher)


def test_the_unit_of_a_server_before_deployments_is_retired_only_when_it_is_this_deployments(tmp_path):
    ours = render_unit("gpu0", "/opt/a/gpu0.sh", "/var/log/a/gpu0.log", "/var/lib/a", 30, OPTIONS)
    launcher, systemctl = launcher_with_units(tmp_path, "/var/lib/a", {legacy_unit_name("gpu0"): ours})
    launcher._retire_legacy_unit("gpu0")
    assert not (tmp_path / legacy_unit_name("gpu0")).exists()
    assert ("disable", "--quiet", "gpuops-sglang-gpu0.service") in systemctl.calls
    assert ("daemon-reload",) in systemctl.calls

    theirs = render_unit("gpu0", "/opt/b/gpu0.sh", "/var/log/b/gpu0.log", "/var/lib/b", 30, OPTIONS)
    launcher, systemctl = launcher_with_units(tmp_path, "/var/lib/a", {legacy_unit_name("gpu0"): theirs})
    launcher._retire_legacy_unit("gpu0")
    assert (tmp_path / legacy_unit_name("gpu0")).read_text() == theirs, "another deployment's unit is left alone"
    assert systemctl.calls == []


def test_a_unit_file_at_our_name_that_is_not_ours_is_never_overwritten(tmp_path):
    name = unit_name("gpu0", "/var/lib/a")
    launcher, _systemctl = launcher_with_units(tmp_path, "/var/lib/a", {name: "[Service]\nExecStart=/bin/true\n"})

    class Plan:
        launches, launcher = True, None

    plan = Plan()
    plan.name, plan.launcher = "gpu0", launcher
    plan.spec = {"name": "gpu0", "launch_script": "/opt/a/gpu0.sh", "log_path": "/var/log/a/gpu0.log"}
    with pytest.raises(LauncherError, match="is not this deployment's unit of gpu0 .*refusing to overwrite it"):
        launcher.prepare([plan], check_mode=False)
    assert (tmp_path / name).read_text() == "[Service]\nExecStart=/bin/true\n"


def test_a_server_gone_from_the_topology_is_deactivated_before_its_kill_and_disabled(tmp_path):
    # Killed while its unit is active, Restart=on-failure would start it again; left enabled, a reboot would.
    launcher, systemctl = launcher_with_units(tmp_path, "/var/lib/a", {})
    launcher.release("gpu1")
    unit = unit_name("gpu1", "/var/lib/a")
    assert systemctl.calls[:3] == [("stop", "--no-block", unit), ("disable", "--quiet", unit), ("reset-failed", unit)]
    assert systemctl.calls[-1][0] == "show", "what systemd says afterwards is checked"


@pytest.mark.parametrize("answers, problem", [
    ({"show": (0, "LoadState=loaded\nUnitFileState=enabled\n")}, r"is still enabled after systemctl disable"),
    ({"stop": (1, ""), "show": (0, "LoadState=loaded\nUnitFileState=disabled\n")},
     r"could not be stopped \(systemctl stop: rc 1\)"),
])
def test_a_unit_that_systemd_would_start_again_is_not_let_go_silently(tmp_path, answers, problem):
    launcher, _systemctl = launcher_with_units(tmp_path, "/var/lib/a", {})
    FakeSystemctl(launcher, answers)
    with pytest.raises(LauncherError, match=unit_name("gpu1", "/var/lib/a").replace(".", r"\.") + " " + problem):
        launcher.release("gpu1")


def test_a_unit_systemd_does_not_know_has_nothing_to_stop(tmp_path):
    launcher, _systemctl = launcher_with_units(tmp_path, "/var/lib/a", {})
    FakeSystemctl(launcher, {"stop": (5, ""), "show": (0, "LoadState=not-found\nUnitFileState=\n")})
    launcher.release("gpu1")
