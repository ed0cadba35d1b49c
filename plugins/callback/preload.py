# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's controller code imported once, in ansible-playbook itself, whatever prints the output."""

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Import the collection's controller code once per run, not once per task
description:
  - Every task runs in a fork of C(ansible-playbook). A task that uses one of the collection's filters imports the
    code behind it in its fork, which ends with the task, and Ansible's collection loader compiles every source it
    imports (it keeps no bytecode) - about 0.3 s of controller CPU in a relaunch with nothing to change.
  - This callback imports that code once, when C(ansible-playbook) loads it, so every fork inherits it. It prints
    nothing and changes no result.
  - The stdout callback M(gpuops.sglang.operator) does the same; enable this one where another callback prints
    the output, such as AWX's or C(ansible.posix.json).
requirements:
  - enable it in the configuration, for example C(callbacks_enabled = gpuops.sglang.preload) in C(ansible.cfg) or
    C(ANSIBLE_CALLBACKS_ENABLED=gpuops.sglang.preload) in the environment (an AWX job template's or execution
    environment's)
"""

from ansible.plugins.callback import CallbackBase
from ansible_collections.gpuops.sglang.plugins.filter.sglang import import_all

import_all()


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuops.sglang.preload"
    CALLBACK_NEEDS_ENABLED = True
