"""sglang_install: which SGLang an interpreter has, read by that interpreter (real subprocesses)."""

import sys

from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_install import (
    installed_sglang,
    installed_sglang_of,
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
    hung = tmp_path / "hung-python"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    found = installed_sglang_of(["no-such-python-here", "/bin/true", str(hung), "/bin/true"], timeout=0.5)
    assert [entry["interpreter"] for entry in found] == ["no-such-python-here", "/bin/true", str(hung)]
    assert all(entry["version"] is None for entry in found)
    assert found[0]["problem"] == "no-such-python-here (the server command's interpreter) is not found on this host"
    assert found[1]["problem"].startswith("cannot read the SGLang version with /bin/true (is it a Python >= 3.8?)")
    assert found[2]["problem"].startswith(f"cannot read the SGLang version with {hung}: ")
    assert "did not answer within 0.5 s" in found[2]["problem"]
