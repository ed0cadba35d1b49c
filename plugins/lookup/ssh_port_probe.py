# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
name: ssh_port_probe
version_added: 0.2.0
author: gpuops.sglang contributors (@gpuops)
short_description: Why the SSH port of a Proxmox node cannot be used, in words
description:
  - Connects from the controller to O(_terms[0]) on O(port) and says what it found - refused, no answer
    within O(timeout), no route, accepted but no SSH banner, or the banner. community.proxmox 2.0.0 reports
    every failure to connect as the same AttributeError; the relaunch role uses this to say which it was.
  - Only connects and reads the banner; it sends nothing.
options:
  _terms:
    description: The node's address.
    type: list
    elements: str
    required: true
  port:
    description: The node's SSH port.
    type: int
    default: 22
  timeout:
    description: Seconds to wait for the connection and for the banner.
    type: float
    default: 10
"""

EXAMPLES = r"""
- name: Say why the node cannot be reached
  ansible.builtin.debug:
    msg: "{{ lookup('gpuops.sglang.ssh_port_probe', 'pve1.example.com', port=22, timeout=5) }}"
"""

RETURN = r"""
_raw:
  description: 'One sentence, e.g. C(port 22: connection refused).'
  type: list
  elements: str
"""

import socket

from ansible.plugins.lookup import LookupBase


def probe(host, port, timeout):
    try:
        sock = socket.create_connection((host, port), timeout)
    except socket.timeout:
        return f"no answer from port {port} within {timeout:g} s"
    except OSError as exc:
        return f"port {port}: {(exc.strerror or str(exc)).lower()}"
    with sock:
        try:
            banner = sock.recv(255).decode(errors="replace").strip()
        except socket.timeout:
            return f"port {port} accepts connections but sent no SSH banner within {timeout:g} s"
        except OSError as exc:
            return f"port {port} accepts connections, then: {(exc.strerror or str(exc)).lower()}"
    return f"port {port} answers {banner.splitlines()[0]!r}" if banner else f"port {port} closed the connection"


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [probe(host, self.get_option("port"), float(self.get_option("timeout"))) for host in terms]
