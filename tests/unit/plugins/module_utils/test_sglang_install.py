"""sglang_install: which SGLang an interpreter has, read by that interpreter (real subprocesses)."""

import sys

from ansible_collections.gpuops.sglang.plugins.module_utils.bounded_command import (
    run_bounded,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_install import (
    installed_sglang,
    installed_sglang_of,
    server_versions,
)


def site_with_sglang(tmp_path, version):
    dist_info = tmp_path / "site" / f"sglang-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return tmp_path / "site"


def test_the_version_comes_from_the_interpreter_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(site_with_sglang(tmp_path, "0.5.23")))
    assert installed_sglang(sys.executable) == {"interpreter": sys.executable, "version": "0.5.23",
                                                "location": str(tmp_path / "site")}


def test_an_interpreter_without_sglang_says_so_in_one_sentence(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert installed_sglang(sys.executable) == {
        "interpreter": sys.executable, "version": None,
        "problem": f"SGLang is not installed for {sys.executable} (no sglang distribution in its environment)"}


def test_a_missing_or_foreign_or_hung_interpreter_is_said_not_guessed(tmp_path):
    hung = tmp_path / "bin" / "python3"
    hung.parent.mkdir()
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    found = installed_sglang_of(["no-such-python-here", "/bin/true", str(hung), "/bin/true"], timeout=0.5)
    assert [entry["interpreter"] for entry in found] == ["no-such-python-here", "/bin/true", str(hung)]
    assert all(entry["version"] is None for entry in found)
    assert found[0]["problem"] == "no-such-python-here (the server command's interpreter) is not found on this host"
    # A word that is no Python is never run with the reader.
    assert found[1]["problem"] == ("/bin/true is not a Python interpreter or a Python script: the SGLang version it "
                                   "runs cannot be read; set sglang_version")
    assert found[2]["problem"] == f"cannot read the SGLang version with {hung}: it did not answer within 0.5 s"


def test_a_console_script_is_read_through_the_python_of_its_shebang(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(site_with_sglang(tmp_path, "0.5.23")))
    script = tmp_path / "sglang"
    script.write_text(f"#!{sys.executable}\nimport sys\n")
    script.chmod(0o755)
    assert installed_sglang(str(script))["version"] == "0.5.23"


def test_a_dist_info_in_the_working_directory_is_not_the_installed_one(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(site_with_sglang(tmp_path, "9.9.9"))
    assert installed_sglang(sys.executable)["version"] is None


def test_each_server_is_read_with_its_scripts_environment_each_interpreter_and_environment_once(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    calls = []

    def counted_run(argv, timeout, env=None):
        calls.append(argv[0])
        return run_bounded(argv, timeout, env=env)

    # The scripts export a PYTHONPATH (sglang_env): the servers import from there, so the reader does too.
    exported = {"PYTHONPATH": str(site_with_sglang(tmp_path, "0.5.10")), "HF_TOKEN": "********"}
    settings = {name: {"command": [sys.executable, "-m", "sglang.launch_server"], "flags": {}, "env": exported}
                for name in ("gpu0", "gpu1")}
    settings["plain"] = {"command": [sys.executable], "flags": {}, "env": {}}
    versions = server_versions(dict(settings, unrecorded=None), run=counted_run)
    found = {name: entry["version"] for name, entry in versions.items()}
    assert found == {"gpu0": "0.5.10", "gpu1": "0.5.10", "plain": None}
    assert calls == [sys.executable, sys.executable], "one read per interpreter and environment"


def test_the_launch_environment_decides_which_python_and_what_it_imports(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python3").symlink_to(sys.executable)
    env = {"PATH": f"{venv_bin}:/usr/bin:/bin", "PYTHONPATH": str(site_with_sglang(tmp_path, "0.5.23")),
           "SECRET_TOKEN": "never-used"}
    found = installed_sglang("python3", env=env)
    assert found["interpreter"] == "python3" and found["version"] == "0.5.23"
    assert installed_sglang_of(["python3"], env=env)[0]["version"] == "0.5.23"
