# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A failed task's result as the operator should read it: its own sentence, once. Pure, for the stdout callback
gpuops.sglang.operator (plugins/callback/operator.py).

ansible-core prints every failure twice (an ``[ERROR]`` block from the result's exception, then the result) and
wraps a message raised while templating or in an action in its own words (``Task failed: Finalization of task
args for 'ansible.builtin.set_fact' failed: Error while resolving value for ...: The filter plugin ... failed:``).
What Ansible adds to restate a failure for itself - a role's whole argument spec, an assert's expression, a
failed_when's verdict - is left out too. At -vvv nothing is touched."""

from __future__ import annotations

import re

# The words ansible-core puts in front of the message that failed, outermost first; they repeat when nested.
_WRAPPERS = re.compile(
    r"^(?:Task failed: "
    r"|Action failed: "
    r"|Module failed: "
    r"|Finalization of task args for '[^']*' failed: "
    r"|Error while resolving value for '[^']*': "
    r"|The filter plugin '[^']*' failed: )"
)

# Keys Ansible adds to a failed result that say nothing the message does not.
RESTATING_KEYS = (
    "exception",  # printed as the [ERROR] block: the message again, with the task's origin
    "argument_spec_data",  # a failed role argument validation: the role's whole spec (hundreds of lines)
    "validate_args_context",
    "assertion",  # ansible.builtin.assert: the expression, and that it was false
    "evaluated_to",
    "failed_when_result",  # failed_when: that it was true
    "failed_when_suppressed_exception",
)

SHOW_EVERYTHING_VERBOSITY = 3

# What goes on on the host when ansible-playbook is interrupted (Ctrl-C) in a task of these modules - their work runs
# detached there, each call a slice of it (plugin_utils/sliced.py) - and how the operator sees it.
GOES_ON = {
    "gpuops.sglang.server": "the server sequence it started (stop, verify GPU memory, launch) goes on there, detached, "
                            "and finishes every server it began. The next relaunch waits for it, takes over this "
                            "run's hold, says what it did and records it in the journal (playbooks/history.yml)",
    "gpuops.sglang.wait": "the servers go on starting on their own; nothing is stopped. playbooks/status.yml shows "
                          "how far they got; the next relaunch takes over this run's hold, and playbooks/history.yml "
                          "shows this run as not waited for",
    "gpuops.sglang.probe": "the probe's load ends on its own at the end of its duration; the servers keep serving",
    # A relaunch in the hold's one call (module_utils/converge.py): the server sequence, then the wait. A hold that
    # was still waiting for the host, or a release, began nothing.
    "gpuops.sglang.host_lock": "a relaunch it began goes on there: the server sequence it started (stop, verify GPU "
                               "memory, launch) finishes every server it began, detached, and the servers go on "
                               "starting on their own; nothing is stopped. playbooks/status.yml shows how far they "
                               "got; the next relaunch takes over this run's hold, and playbooks/history.yml shows "
                               "what this run changed",
}


def unwrapped(message):
    """The sentence inside Ansible's wrappers; a message without them is returned as it is."""
    if not isinstance(message, str):
        return message
    while (match := _WRAPPERS.match(message)) is not None:
        message = message[match.end():]
    return message


def failure_sentence(message):
    """A failure's message as the text to print: a list of problems one per line; None when it is neither a string
    nor a list of strings (the result is then shown as Ansible shows it)."""
    if isinstance(message, str) and message:
        return message
    if isinstance(message, list) and message and all(isinstance(item, str) for item in message):
        return "\n".join(message)
    return None


def operator_failure(result, verbosity):
    """The failed task result ``result`` (a dict) as the callback shows it, changed in place: the restating keys
    dropped and the message unwrapped, below -vvv (a no_log result is left whole). A role's argument validation keeps its argument_errors only
    where its message does not already say them."""
    if verbosity >= SHOW_EVERYTHING_VERBOSITY or "censored" in result:
        # A no_log result says only that it is hidden: Ansible's [ERROR] block is then what names the failure.
        return result
    for key in RESTATING_KEYS:
        result.pop(key, None)
    result["msg"] = unwrapped(result.get("msg"))
    errors = result.get("argument_errors")
    if isinstance(errors, list) and isinstance(result["msg"], str) and all(error in result["msg"] for error in errors):
        del result["argument_errors"]
    if result["msg"] is None:
        del result["msg"]
    return result


def interruption_note(task_name, action):
    """What an operator who pressed Ctrl-C in task ``task_name`` (module ``action``) needs to know: what goes on on
    the hosts, and how to see it. None for a task that leaves nothing running."""
    goes_on = GOES_ON.get(action)
    return f"Interrupted in '{task_name}': on each host where it had begun, {goes_on}." if goes_on else None
