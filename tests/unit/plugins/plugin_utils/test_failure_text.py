"""What the stdout callback gpuops.sglang.operator shows of a failed task (the messages as ansible-core 2.21 writes
them; tests/integration/test_roles.py reads the real output)."""

from ansible_collections.gpuops.sglang.plugins.plugin_utils.failure_text import (
    failure_sentence,
    interruption_note,
    operator_failure,
    unwrapped,
)

SENTENCE = "gpu_count=8 cannot be split into servers of tp_size*dp_size=3 GPUs; use a tp_size*dp_size that divides it"


def test_the_wrappers_of_a_filter_raised_inside_set_fact_are_removed_to_the_sentence():
    wrapped = ("Task failed: Finalization of task args for 'ansible.builtin.set_fact' failed: Error while resolving "
               "value for 'launch_scripts_servers': The filter plugin 'gpuops.sglang.topology' failed: " + SENTENCE)
    assert unwrapped(wrapped) == SENTENCE
    assert unwrapped("Task failed: Action failed: " + SENTENCE) == SENTENCE
    assert unwrapped("Task failed: Module failed: " + SENTENCE) == SENTENCE


def test_a_message_without_wrappers_or_not_a_string_is_left_as_it_is():
    assert unwrapped(SENTENCE) == SENTENCE
    assert unwrapped("server 'a' failed: Task failed: x") == "server 'a' failed: Task failed: x", "only in front"
    assert unwrapped(["a", "b"]) == ["a", "b"]
    assert unwrapped(None) is None


def test_what_restates_the_failure_is_dropped_below_vvv_and_kept_at_it():
    def assert_failure():
        return {"failed": True, "changed": False, "msg": ["sglang_tp_size=0 is out of range: use 1-1024"],
                "assertion": "problems | length == 0", "evaluated_to": False, "exception": "Traceback ..."}

    assert operator_failure(assert_failure(), verbosity=0) == {
        "failed": True, "changed": False, "msg": ["sglang_tp_size=0 is out of range: use 1-1024"]}
    assert operator_failure(assert_failure(), verbosity=3) == assert_failure()
    failed_when = {"failed": True, "msg": "Task failed: Action failed: the hold is held by run r1",
                   "failed_when_result": True, "failed_when_suppressed_exception": "(traceback unavailable)"}
    assert operator_failure(failed_when, verbosity=2) == {"failed": True, "msg": "the hold is held by run r1"}


def test_a_failed_argument_validation_keeps_its_message_without_the_spec_and_the_errors_it_already_says():
    error = "argument 'sglang_tp_size' is of type str and we were unable to convert to int"
    result = {"failed": True, "msg": "Validation of arguments failed:\n" + error, "argument_errors": [error],
              "argument_spec_data": {"sglang_tp_size": {"type": "int"}}, "validate_args_context": {"name": "settings"}}
    assert operator_failure(result, verbosity=0) == {"failed": True, "msg": "Validation of arguments failed:\n" + error}
    unsaid = {"failed": True, "msg": "Validation of arguments failed", "argument_errors": [error]}
    assert operator_failure(dict(unsaid), verbosity=0) == unsaid
    assert "msg" not in operator_failure({"failed": True, "exception": "x"}, verbosity=0), "no msg: none shown"


def test_an_interruption_says_what_goes_on_for_the_modules_that_leave_work_running():
    note = interruption_note("Bring servers to state started", "gpuops.sglang.server")
    assert note.startswith("Interrupted in 'Bring servers to state started': on each host where it had begun, the "
                           "server sequence it started (stop, verify GPU memory, launch) goes on there")
    assert note.endswith("records it in the journal (playbooks/history.yml).")
    assert interruption_note("Summary", "ansible.builtin.debug") is None


def test_the_message_is_printed_as_text_a_list_one_problem_per_line():
    assert failure_sentence("gpu0 crashed\nTraceback (most recent call last):") == (
        "gpu0 crashed\nTraceback (most recent call last):")
    assert failure_sentence(["a is out of range", "b must be a dict"]) == "a is out of range\nb must be a dict"
    assert failure_sentence(None) is None and failure_sentence([{"a": 1}]) is None and failure_sentence("") is None


def test_a_no_log_result_keeps_the_exception_that_names_its_failure():
    hidden = {"failed": True, "censored": "the output has been hidden due to the fact that 'no_log: true' was "
                                          "specified for this result", "exception": "NCCL_NTHREADS='100' is not valid"}
    assert operator_failure(dict(hidden), verbosity=0) == hidden
