"""The systemd unit a server runs in, rendered from the same settings as the detached launch."""

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.argument_specs import (
    SYSTEMD_OPTIONS,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launchers import (
    SystemdLauncher,
    defaults,
    render_unit,
    unit_name,
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
    assert unit_name("gpu0") == "gpuops-sglang-gpu0.service"
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


@pytest.mark.parametrize("path", ["/opt/my scripts/gpu0.sh", "/opt/x'y/gpu0.sh", "/opt/a\\b.sh", "/opt/a;b.sh"])
def test_paths_a_unit_cannot_hold_are_named(path):
    problems = unit_problems("servers[0] (gpu0)", {"launch_script": path, "log_path": "/var/log/g.log"}, "/var/lib/g")
    assert problems == [(f"servers[0] (gpu0).launch_script {path!r} cannot be used in a systemd unit (no whitespace, "
                        "quotes, backslashes or ';'): choose another path or sglang_launcher: detached")]


def test_plain_paths_are_fine():
    assert unit_problems("s", {"launch_script": "/opt/a.sh", "log_path": "/var/log/a.log"}, "/var/lib/g") == []


def test_only_the_units_own_cgroup_counts_never_a_parent(tmp_path):
    # A cgroup v1 hybrid as in an LXC container: processes entered with lxc-attach (this module's worker too) sit
    # in the root of the name=systemd hierarchy; an inactive unit's ControlGroup is empty.
    root = tmp_path / "systemd"
    unit = root / "system.slice" / "gpuops-sglang-gpu0.service"
    unit.mkdir(parents=True)
    (root / "cgroup.procs").write_text("1\n149\n")
    (root / "system.slice" / "cgroup.procs").write_text("77\n")
    (unit / "cgroup.procs").write_text("60\n89\n")
    launcher = SystemdLauncher(None, OPTIONS, "/var/lib/g", 30, cgroup_roots=(str(tmp_path / "absent"), str(root)))
    assert launcher._cgroup_pids("gpu0", "/system.slice/gpuops-sglang-gpu0.service") == {60, 89}
    assert launcher._cgroup_pids("gpu0", "") == set()
    assert launcher._cgroup_pids("gpu0", None) == set()
    assert launcher._cgroup_pids("gpu0", "/system.slice") == set()
    assert launcher._cgroup_pids("gpu1", "/system.slice/gpuops-sglang-gpu0.service") == set()
