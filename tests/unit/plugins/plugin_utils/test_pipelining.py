"""Which connection gets our modules on stdin (one exec per module call), and which the temp dir path."""

import pytest
from ansible.plugins.connection.local import Connection as LocalConnection
from ansible.plugins.connection.ssh import Connection as SshConnection
from ansible_collections.community.proxmox.plugins.connection.proxmox_pct_remote import (
    Connection as PctConnection,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.pipelining import (
    PIPELINED_BY_ANSIBLE,
    PIPELINED_HERE,
    STDIN_CONNECTIONS,
    TEMP_FILES,
    module_path,
)

PCT = PctConnection.transport


@pytest.mark.parametrize("transport", [PCT, LocalConnection.transport])
def test_known_stdin_connections_are_pipelined_here_without_become(transport):
    assert module_path(transport, become=False, ansible_pipelines=False) == PIPELINED_HERE


@pytest.mark.parametrize("transport", [PCT, LocalConnection.transport])
def test_become_keeps_the_temp_dir_path_where_ansible_does_not_pipeline(transport):
    assert module_path(transport, become=True, ansible_pipelines=False) == TEMP_FILES


def test_ssh_follows_ansibles_pipelining_setting():
    assert module_path(SshConnection.transport, become=False, ansible_pipelines=False) == TEMP_FILES
    assert module_path(SshConnection.transport, become=False, ansible_pipelines=True) == PIPELINED_BY_ANSIBLE


def test_ansibles_own_pipelining_stands_with_become():
    # Ansible pipelined it (its become plugin supports that): nothing of ours changes the command.
    assert module_path(LocalConnection.transport, become=True, ansible_pipelines=True) == PIPELINED_BY_ANSIBLE


@pytest.mark.parametrize("transport", ["community.docker.docker", "community.general.lxc", "winrm",
                                       "proxmox_pct_remote_fork"])
def test_connections_not_known_to_pass_stdin_keep_the_temp_dir_path(transport):
    assert module_path(transport, become=False, ansible_pipelines=False) == TEMP_FILES


def test_kept_remote_files_and_async_need_the_files():
    assert module_path(PCT, become=False, ansible_pipelines=False, keep_remote_files=True) == TEMP_FILES
    assert module_path(PCT, become=False, ansible_pipelines=False, wrap_async=True) == TEMP_FILES


def test_known_names_are_the_transports_of_the_installed_plugins():
    # A typo here would silently send every module call of a pct host back to six round trips.
    assert STDIN_CONNECTIONS == {PctConnection.transport, LocalConnection.transport}
    assert not PctConnection.has_pipelining, "proxmox_pct_remote pipelines by itself now: drop it from the list"
