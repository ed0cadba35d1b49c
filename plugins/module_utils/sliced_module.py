# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The main() of a module that an action plugin runs in slices (plugin_utils/sliced.py): one slice per call."""

from ansible.module_utils.basic import AnsibleModule


def run_slice(argument_spec, slice_function, user_errors):
    """Run ``slice_function(params, carry=..., check_mode=...)`` once; an exception of ``user_errors`` fails the
    task with its message, a result with ``failed`` fails it with that result."""
    # _carry: what the previous slice handed over (set by the action plugin).
    module = AnsibleModule(argument_spec=dict(argument_spec, _carry={"type": "dict"}), supports_check_mode=True)
    try:
        result = slice_function(module.params, carry=module.params["_carry"], check_mode=module.check_mode)
    except user_errors as error:
        module.fail_json(msg=str(error))
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)
