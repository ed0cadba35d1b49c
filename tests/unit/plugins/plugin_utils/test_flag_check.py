"""flag_check: flags against the generated tables of the real SGLang parsers (0.5.9, 0.5.10, 0.5.23)."""

import pytest
from ansible_collections.gpuops.sglang.plugins.plugin_utils import flag_check
from ansible_collections.gpuops.sglang.plugins.plugin_utils.sglang_flag_tables import (
    OPTIONS,
)


def test_the_tables_hold_the_supported_versions():
    assert flag_check.known_versions() == ["0.5.9", "0.5.10", "0.5.23"]
    assert flag_check.table_version("0.5.10.post1") == "0.5.10"
    assert flag_check.table_version("v0.5.23") == "0.5.23"
    assert flag_check.table_version("0.5.15") is None
    assert flag_check.table_version(None) is None


@pytest.mark.parametrize("old, new", sorted(flag_check.RENAMED.items()))
def test_every_rename_goes_from_an_older_table_to_the_newest(old, new):
    assert old in OPTIONS["0.5.10"]
    assert all(successor in OPTIONS["0.5.23"] for successor in new)


def test_a_launch_of_0_5_10_passes_0_5_10_and_fails_0_5_23_naming_the_new_spelling():
    flags = ["--model-path", "/models/m", "--port", "30000", "--tp-size", "1", "--mamba-scheduler-strategy",
             "extra_buffer", "--cuda-graph-max-bs", "64"]
    assert flag_check.check_flags(flags, "0.5.10") == ([], [])
    problems, warnings = flag_check.check_flags(flags, "0.5.23")
    assert problems == [
        "SGLang 0.5.23: --mamba-scheduler-strategy does not exist; it was renamed: use --mamba-radix-cache-strategy",
        ("SGLang 0.5.23: --cuda-graph-max-bs is ambiguous (an abbreviation of --cuda-graph-max-bs-decode, "
         "--cuda-graph-max-bs-prefill); it was renamed: use --cuda-graph-max-bs-decode or --cuda-graph-max-bs-prefill"),
    ]
    assert warnings == []


def test_a_typo_names_the_nearest_options():
    problems, _warnings = flag_check.check_flags(["--mem-fracton-static", "0.8"], "0.5.23")
    assert problems == ["SGLang 0.5.23: --mem-fracton-static is not an option; did you mean --mem-fraction-static?"]


def test_a_choice_outside_the_version_choices_names_them():
    problems, _warnings = flag_check.check_flags(["--mamba-radix-cache-strategy", "extra_buffer_lazy"], "0.5.23")
    assert problems == []
    problems, _warnings = flag_check.check_flags(["--mamba-scheduler-strategy", "extra_buffer_lazy"], "0.5.10")
    assert problems == [("SGLang 0.5.10: --mamba-scheduler-strategy 'extra_buffer_lazy' is not a valid choice; use one "
                         "of auto, no_buffer, extra_buffer")]


@pytest.mark.parametrize("flags, problem", [
    (["--tp-size"], "--tp-size needs a value"),
    (["--tp-size", "--enable-metrics"], "--tp-size needs a value"),
    (["--enable-metrics=yes"], "--enable-metrics takes no value; 'yes' would be left over"),
    (["--enable-metrics", "yes"], "--enable-metrics takes no value; 'yes' would be left over"),
    (["--port", "1", "2"], "--port takes one value; '2' would be left over"),
    (["/models/m"], "'/models/m' is not an option (SGLang takes no positional arguments)"),
])
def test_values_are_counted_as_argparse_counts_them(flags, problem):
    problems, _warnings = flag_check.check_flags(flags, "0.5.23")
    assert [item.replace("SGLang 0.5.23: ", "") for item in problems] == [problem]


def test_values_after_equals_and_negative_numbers_are_values():
    assert flag_check.check_flags(["--port=30000", "--random-seed", "-1", "--cuda-graph-bs-decode", "1", "2", "4"],
                                  "0.5.23") == ([], [])


def test_deprecated_flags_warn_with_their_successor_and_abbreviations_warn():
    problems, warnings = flag_check.check_flags(["--disable-cuda-graph", "--mem-fraction", "0.8"], "0.5.23")
    assert problems == []
    assert warnings == [
        "SGLang 0.5.23: --disable-cuda-graph is deprecated; use --cuda-graph-backend-{decode,prefill}=disabled",
        ("SGLang 0.5.23: --mem-fraction abbreviates --mem-fraction-static; spell it out (an abbreviation can become "
         "ambiguous in a later version)"),
    ]


def test_a_retired_flag_is_refused_with_the_parser_words(monkeypatch):
    table = dict(OPTIONS["0.5.23"], **{"--old-flag": ("flag", None, ("fails", "--old-flag is gone: use --new-flag"))})
    monkeypatch.setitem(OPTIONS, "0.5.23", table)
    assert flag_check.check_flags(["--old-flag"], "0.5.23")[0] == [
        "SGLang 0.5.23: --old-flag is retired: --old-flag is gone: use --new-flag"]


def test_a_credential_is_never_repeated_in_a_problem():
    problems, _warnings = flag_check.check_flags(["--api-key", "sk-secret", "sk-other"], "0.5.23")
    assert problems and "sk-" not in " ".join(problems)


@pytest.mark.parametrize("key", ["-Xsecret", "--Xsecret"])
def test_a_key_that_looks_like_an_option_is_refused_without_being_shown(key):
    problems, _warnings = flag_check.check_flags(["--api-key", key, "--port", "1"], "0.5.23")
    assert problems[0] == "SGLang 0.5.23: --api-key needs a value"
    assert len(problems) == 2 and "secret" not in " ".join(problems)


def test_a_word_after_a_value_given_with_equals_is_left_over_as_argparse_leaves_it():
    problems, _warnings = flag_check.check_flags(["--cuda-graph-bs-decode=1", "2"], "0.5.23")
    assert problems == ["'2' is not an option (SGLang takes no positional arguments)"]
