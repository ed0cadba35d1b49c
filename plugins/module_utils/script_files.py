# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a set of generated files (launch scripts) atomically, reporting which changed.

Stdlib only: runs on the GPU host inside the module.
"""

import hashlib
import os
import re
import stat
import tempfile

REDACTED = "********"
# Values of these flags are secrets even when they are not the current key (a diff shows the old one).
_SECRET_FLAG_RE = re.compile(r"(--(?:admin-)?api-key[ =])(.*?)((?: \\)?)$", re.MULTILINE)


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_current(path):
    """(content, mode) of an existing regular file, or (None, None) when absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(st.st_mode):
        raise IsADirectoryError(f"{path} exists and is not a regular file")
    with open(path, "r", encoding="utf-8", errors="surrogateescape") as handle:
        return handle.read(), stat.S_IMODE(st.st_mode)


def plan_file(path, content, mode):
    """What writing ``content`` with ``mode`` to ``path`` would change."""
    before, before_mode = read_current(path)
    return {
        "path": path,
        "before": before,
        "content_changed": before != content,
        "mode_changed": before_mode is not None and before_mode != mode,
        "sha256": sha256_text(content),
    }


def write_atomic(path, content, mode, directory_mode):
    """Replace ``path`` in one rename so a server never execs a half-written script."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, directory_mode)
    fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_path, mode)
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise


def sync_file(path, content, mode, directory_mode, check_mode):
    """Bring one file to ``content``/``mode``; returns the plan (with ``changed``)."""
    plan = plan_file(path, content, mode)
    plan["changed"] = plan["content_changed"] or plan["mode_changed"]
    if check_mode or not plan["changed"]:
        return plan
    if plan["content_changed"]:
        write_atomic(path, content, mode, directory_mode)
    else:
        os.chmod(path, mode)
    return plan


def redact(text, secrets=()):
    """Hide secrets (and any API key flag value) from text shown in diffs."""
    if text is None:
        return None
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return _SECRET_FLAG_RE.sub(lambda match: match.group(1) + REDACTED + match.group(3), text)
