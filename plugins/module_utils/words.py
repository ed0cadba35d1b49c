# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Words of the messages both sides print: a count with its noun in the singular when there is one."""


def counted(number, noun, plural=None):
    """``1 server``, ``3 servers``, ``2 GPUs`` (``plural`` where adding an s is wrong)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
