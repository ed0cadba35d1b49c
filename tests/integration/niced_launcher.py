"""A launcher that exists only for the tests, written as a new launcher would be: this one file.

It runs the launch script under ``nice`` in a session of its own: it has an option of its own (``niceness``),
refuses what it cannot run (a launch script that is not an absolute path), adds its setting to the comparison
that decides a relaunch, and finds the server's processes through the same owner as every launcher.
test_launcher_contract.py registers it in ``launchers.LAUNCHERS`` and drives it through ServerControl.
"""

import os
import signal
import subprocess

from ansible_collections.gpuops.sglang.plugins.module_utils.launchers import (
    Launcher,
    LauncherError,
    Running,
)


class NicedLauncher(Launcher):
    name = "niced"
    compared = (("niceness", "niceness"),)

    def __init__(self, owner, niceness):
        super().__init__(owner)
        self.niceness = niceness

    @classmethod
    def for_call(cls, owner, params):
        return cls(owner, params.get("niceness", 10))

    def option_problems(self, params):
        if not isinstance(self.niceness, int) or not 0 <= self.niceness <= 19:
            return [f"niceness must be an integer from 0 to 19, got {self.niceness!r}"]
        return []

    def server_problems(self, where, spec):
        script = spec.get("launch_script") or ""
        return [] if os.path.isabs(script) else [f"{where}.launch_script {script!r} must be an absolute path"]

    def desired(self, spec):
        return {"niceness": self.niceness}

    def observe(self, name, recorded):
        processes, group = self.owner.of_server(name, recorded)
        return Running(processes, group, self.owner.main_process(recorded))

    def stop(self, name, processes, group, force):
        return self.owner.signal(processes, [group] if group else [], signal.SIGKILL if force else signal.SIGTERM)

    def kill(self, name, recorded=None):
        return self.owner.kill_now(name, recorded)

    def start(self, plan, log_fd, env):
        script = plan.spec["launch_script"]
        try:
            process = subprocess.Popen(["nice", "-n", str(self.niceness), script], stdin=subprocess.DEVNULL,
                                       stdout=log_fd, stderr=subprocess.STDOUT, cwd=os.path.dirname(script),
                                       env=env, close_fds=True, start_new_session=True)
        except OSError as exc:
            raise LauncherError(f"cannot run nice: {exc}")
        return process.pid

    def status(self, name, recorded):
        return {"launcher": self.name, "niceness": self.niceness}
