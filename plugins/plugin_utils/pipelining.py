# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every module call of this collection in one exec where the connection allows: the module on stdin.

Ansible pipelines a module only through a connection that declares it (``has_pipelining``) with its
``pipelining`` setting on. ``community.proxmox.proxmox_pct_remote`` declares nothing, so a module call
costs six ``pct exec`` round trips (home dir, mkdir, ``cat >`` the module, chmod, run, rm). Its
``exec_command`` does hand ``in_data`` to the command's stdin, though (``put_file`` copies every file that
way), so our action plugins let ActionBase do what Ansible's pipelining does for the connections in
``STDIN_CONNECTIONS``: the same AnsiballZ payload on stdin of the interpreter, one exec, no temp dir on the
host, nothing to clean up. docs/round-trips.md says when each path is taken and what it costs.
"""

from __future__ import annotations

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.utils.display import Display
from ansible_collections.gpuops.sglang.plugins.plugin_utils.payload_cache import (
    KeptPayloads,
)

display = Display()

# Connections whose exec_command passes in_data to the command's stdin unchanged when the command is not
# sudoable (then they open no PTY, which would echo the payload and cut its lines at 4095 bytes).
STDIN_CONNECTIONS = frozenset({"community.proxmox.proxmox_pct_remote", "local"})

# How a module reaches the host.
PIPELINED_BY_ANSIBLE = "pipelined by Ansible"
PIPELINED_HERE = "pipelined by gpuops.sglang"
TEMP_FILES = "through a remote temp dir"


def module_path(transport, become, ansible_pipelines, keep_remote_files=False, wrap_async=False):
    """How a new-style module of ours reaches the host: PIPELINED_BY_ANSIBLE, PIPELINED_HERE or TEMP_FILES.

    Ansible's own decision (``ansible_pipelines``: the ssh ``pipelining`` setting, the become plugin's
    support) stands wherever it pipelines. Otherwise we pipeline only through a connection known to pass
    stdin, and only without become: the command then needs no PTY for a prompt, and in a container reached
    through pct the module runs as root already. ANSIBLE_KEEP_REMOTE_FILES asks for the files; async needs
    them (async_wrapper runs the module from the temp dir).
    """
    if ansible_pipelines:
        return PIPELINED_BY_ANSIBLE
    if transport in STDIN_CONNECTIONS and not become and not keep_remote_files and not wrap_async:
        return PIPELINED_HERE
    return TEMP_FILES


class PipelinedAction(ActionBase):
    """ActionBase with our pipelining decision: call ``_execute_module`` with keywords, the rest is Ansible's."""

    _module_on_stdin = None

    def _module_path(self, wrap_async=False):
        return module_path(self._connection.transport, self._connection.become is not None,
                           super()._is_pipelining_enabled("new", wrap_async), C.DEFAULT_KEEP_REMOTE_FILES, wrap_async)

    def _is_pipelining_enabled(self, module_style, wrap_async=False):
        return module_style == "new" and self._module_path(wrap_async) != TEMP_FILES

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, wrap_async=False, **kwargs):
        shown = module_name or self._task.resolved_action or self._task.action
        path = self._module_path(wrap_async)
        display.vvv(f"{shown}: {path} ({self._connection.transport}"
                    f"{', become' if self._connection.become is not None else ''})",
                    host=self._play_context.remote_addr)
        # While it is set, the one command given stdin is the module run itself: pipelined, ActionBase makes
        # no temp dir (and interpreter discovery sends no stdin).
        self._module_on_stdin = (shown, path) if path != TEMP_FILES else None
        # The payload an earlier run built from the same sources, instead of building it again (payload_cache).
        payloads = KeptPayloads.of_this_run()
        if payloads:
            payloads.seed()
        try:
            result = super()._execute_module(module_name=module_name, module_args=module_args, task_vars=task_vars,
                                             wrap_async=wrap_async, **kwargs)
        finally:
            self._module_on_stdin = None
            if payloads:
                payloads.keep()
        if path == PIPELINED_HERE and "module_stdout" in result:  # no JSON came back
            self._raise_if_host_runs_nothing(result)
        return result

    def _raise_if_host_runs_nothing(self, result):
        """Unreachable, as the temp dir path found at its first command, where the host runs no command at all.

        pct exec into a stopped or missing container answers rc 2 and its words on stderr, like a module
        that died before answering; one command that needs no module (the temp dir path's first) tells them apart.
        """
        probe = self._connection._shell.expand_user("~")
        answer = self._low_level_execute_command(probe, sudoable=False)
        if answer["rc"] != 0:
            said = answer["stderr"].strip() or answer["stdout"].strip()
            raise AnsibleConnectionFailure(
                f"the host runs no command: `{probe}` exited with {answer['rc']}{f' ({said})' if said else ''}, "
                f"and the module's interpreter with {result.get('rc')}")

    def _low_level_execute_command(self, cmd, sudoable=True, in_data=None, *args, **kwargs):
        if in_data is not None and self._module_on_stdin:
            module_name, path = self._module_on_stdin
            # The standard path names the module in its file (AnsiballZ_<name>.py); this names it in the exec
            # line (-vvv, the node's process list, pct call logs).
            cmd = f"{cmd} # {module_name}"
            # Without become, sudoable only asks proxmox_pct_remote for a PTY.
            sudoable = sudoable and path != PIPELINED_HERE
        return super()._low_level_execute_command(cmd, sudoable, in_data, *args, **kwargs)


class ModuleAction(PipelinedAction, NormalAction):
    """The action of a module that runs once: ``ansible.builtin.normal``, with our pipelining decision."""
