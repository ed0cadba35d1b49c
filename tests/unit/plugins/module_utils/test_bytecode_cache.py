"""Our module_utils inside a payload are compiled once per host: a zip laid out as Ansible's AnsiballZ payload (the
package's __init__.py shipped empty), imported by a fresh interpreter as a module would import it."""

import json
import marshal
import os
import stat
import subprocess
import sys
import zipfile

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import _bytecode_cache

PACKAGE = "ansible_collections/gpuops/sglang/plugins/module_utils"
MODULE = PACKAGE.replace("/", ".")
SHAPES = 'VALUE = "{value}"\n\n\ndef fail():\n    raise RuntimeError("boom")\n'

# Records each compile of a module under the package imported after _bytecode_cache (zipimport and the cache both call
# the builtin), then imports as a module does.
IMPORTER = f"""
import builtins, json, sys, traceback
compiled = []
real_compile = builtins.compile
ours = sys.argv[1] + "/{PACKAGE}/"
def counting_compile(source, filename, *args, **kwargs):
    name = filename[len(ours):] if isinstance(filename, str) and filename.startswith(ours) else None
    if name and name not in ("__init__.py", "_bytecode_cache.py"):
        compiled.append(name)
    return real_compile(source, filename, *args, **kwargs)
builtins.compile = counting_compile
sys.path.insert(0, sys.argv[1])
import {MODULE}._bytecode_cache
from {MODULE} import shapes
from {MODULE}._sub import deep
try:
    shapes.fail()
except RuntimeError as exc:
    failed_in = traceback.extract_tb(exc.__traceback__)[-1].filename
print(json.dumps({{"value": shapes.VALUE, "deep": deep.DEEP, "file": shapes.__file__, "failed_in": failed_in,
                  "compiled": sorted(compiled)}}))
"""
# What the importer compiles when nothing is cached (the package's own __init__.py and _bytecode_cache come before it).
EVERY_MODULE = ["_sub/__init__.py", "_sub/deep.py", "shapes.py"]


def payload(path, value="one"):
    """A zip with our package as a payload has it, ``shapes.py`` holding ``value``."""
    with zipfile.ZipFile(path, "w") as archive:
        for package in ("ansible_collections", "ansible_collections/gpuops", "ansible_collections/gpuops/sglang",
                        "ansible_collections/gpuops/sglang/plugins", PACKAGE):
            archive.writestr(package + "/__init__.py", "")
        with open(_bytecode_cache.__file__) as handle:
            archive.writestr(PACKAGE + "/_bytecode_cache.py", handle.read())
        archive.writestr(PACKAGE + "/shapes.py", SHAPES.format(value=value))
        archive.writestr(PACKAGE + "/_sub/__init__.py", "")
        archive.writestr(PACKAGE + "/_sub/deep.py", "DEEP = 42\n")
    return str(path)


def run_module(zip_path, cache, **env):
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    environment.update({_bytecode_cache.CACHE_DIR_VARIABLE: str(cache)}, **env)
    completed = subprocess.run([sys.executable, "-c", IMPORTER, zip_path], capture_output=True, text=True,
                               env=environment, check=True, timeout=60)
    return json.loads(completed.stdout)


def cached(cache):
    return sorted(os.listdir(cache)) if os.path.isdir(cache) else []


def test_each_module_is_compiled_once_then_read_from_the_cache_and_a_changed_source_anew(tmp_path):
    cache = tmp_path / "cache"
    first = run_module(payload(tmp_path / "a.zip"), cache)
    # Once each: zipimport compiled every module twice (get_filename, then get_code).
    assert first["compiled"] == EVERY_MODULE
    assert (first["value"], first["deep"]) == ("one", 42)
    assert len(cached(cache)) == 3 and stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    again = run_module(payload(tmp_path / "a.zip"), cache)
    assert again["compiled"] == [] and again["value"] == "one"
    changed = run_module(payload(tmp_path / "a.zip", value="two"), cache)
    assert changed["compiled"] == ["shapes.py"]
    assert changed["value"] == "two" and len(cached(cache)) == 4


def test_code_from_the_cache_names_the_payload_that_runs_it(tmp_path):
    cache = tmp_path / "cache"
    run_module(payload(tmp_path / "first.zip"), cache)
    later = payload(tmp_path / "later.zip")
    answer = run_module(later, cache)
    assert answer["compiled"] == []
    assert answer["file"] == answer["failed_in"] == os.path.join(later, PACKAGE, "shapes.py")


@pytest.mark.parametrize("spoil", ["group-writable", "a link", "off", "PYTHONDONTWRITEBYTECODE"])
def test_nothing_is_written_or_read_where_the_cache_is_not_this_users_alone_or_not_wanted(tmp_path, spoil):
    cache, env = tmp_path / "cache", {}
    if spoil == "group-writable":
        cache.mkdir(mode=0o770)
        os.chmod(cache, 0o770)
    elif spoil == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        cache.symlink_to(tmp_path / "elsewhere")
    elif spoil == "off":
        env[_bytecode_cache.CACHE_DIR_VARIABLE] = "off"
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    zip_path = payload(tmp_path / "a.zip")
    for _run in range(2):
        answer = run_module(zip_path, cache, **env)
        assert answer["compiled"] == EVERY_MODULE
        assert answer["value"] == "one"
    assert cached(cache) == [] and cached(tmp_path / "elsewhere") == []


def test_a_damaged_cache_file_is_compiled_again_and_replaced(tmp_path):
    cache = tmp_path / "cache"
    zip_path = payload(tmp_path / "a.zip")
    run_module(zip_path, cache)
    for name in cached(cache):
        with open(cache / name, "r+b") as handle:
            handle.truncate(os.path.getsize(cache / name) // 2)
    assert run_module(zip_path, cache)["compiled"] == EVERY_MODULE
    assert run_module(zip_path, cache)["compiled"] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_another_user_put_in_the_cache_is_never_run(tmp_path):
    cache = tmp_path / "cache"
    zip_path = payload(tmp_path / "a.zip")
    run_module(zip_path, cache)
    for name in cached(cache):
        os.chown(cache / name, 65534, 65534)
    assert "shapes.py" in run_module(zip_path, cache)["compiled"]
    assert {os.stat(cache / name).st_uid for name in cached(cache)} == {0}, "replaced by this user's own"


def test_outside_a_payload_nothing_is_installed():
    # This test process imported module_utils from files (the collection loader), as the controller does.
    assert not any(getattr(hook, "__module__", None) == _bytecode_cache.__name__ for hook in sys.path_hooks)
    assert _bytecode_cache.install(sys.modules[_bytecode_cache.__spec__.parent].__spec__) is False


def test_a_directory_in_the_way_is_left_alone(tmp_path):
    """The cache's parent is made when missing (~/.cache), nothing above it."""
    cache = tmp_path / "missing" / "deeper" / "cache"
    run_module(payload(tmp_path / "a.zip"), cache)
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("planted", ["not code", "a FIFO", "a hard link", "group-writable"])
def test_a_file_at_a_key_that_is_not_our_code_alone_is_compiled_over(tmp_path, monkeypatch, planted):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o700)
    source = b"X = 1\n"
    key = _bytecode_cache.cache_key(source)
    target = cache_dir / key
    if planted == "not code":
        target.write_bytes(_bytecode_cache._header(key) + marshal.dumps(42))
    elif planted == "a FIFO":
        os.mkfifo(target, 0o600)
    else:
        _bytecode_cache._Cache(str(cache_dir)).compiled(source, "x.py")
        if planted == "a hard link":
            os.link(target, tmp_path / "elsewhere")
        else:
            os.chmod(target, 0o620)
    namespace = {}
    exec(_bytecode_cache._Cache(str(cache_dir)).compiled(source, "x.py"), namespace)  # noqa: S102
    assert namespace["X"] == 1
    assert os.stat(target).st_nlink == 1 and stat.S_IMODE(os.stat(target).st_mode) == 0o600, "replaced by our own"


def test_a_full_cache_is_emptied_of_our_files_only(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(_bytecode_cache, "MAX_FILES", 2)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o700)
    (cache_dir / "notes.txt").write_text("the operator's")
    cache = _bytecode_cache._Cache(str(cache_dir))
    for value in range(3):
        cache.compiled(f"X = {value}\n".encode(), "x.py")
    assert sorted(path.name for path in cache_dir.iterdir() if path.name != "notes.txt") == [
        _bytecode_cache.cache_key(b"X = 2\n")], "the two before were emptied out"
    assert (cache_dir / "notes.txt").read_text() == "the operator's"


@pytest.mark.parametrize("value, expected", [("off", None), ("", None), ("relative/dir", None),
                                             ("/var/cache/ours", "/var/cache/ours")])
def test_the_directory_an_environment_names(monkeypatch, value, expected):
    monkeypatch.setenv(_bytecode_cache.CACHE_DIR_VARIABLE, value)
    assert _bytecode_cache._default_cache_dir() == expected
