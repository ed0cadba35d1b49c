"""The log, as SGLang's configure_logger and uvicorn write it: ``[timestamp prefix] message`` records written in one
write each (so concurrent processes sharing the log never interleave), tqdm's progress bars on a non-tty stderr,
and the schedulers' log prefixes. The two log dialects, classic (v0.5.9 and v0.5.10) and new (v0.5.23), follow
SGLANG_SIM_VERSION (settings.py); the lines that differ are written where they are logged, on ``sim.new``."""

import os
import time


class Logger:
    def __init__(self, prefix=""):
        self.prefix = prefix
        self.quiet = False

    def info(self, message):
        if not self.quiet:
            self.error(message)

    def error(self, message):
        write_line(2, f"[{timestamp()}{self.prefix}] {message}\n")


def timestamp():
    return time.strftime("%Y-%m-%d %H:%M:%S")


def write_line(fd, text):
    # One write per record so lines of concurrent processes sharing the log never interleave.
    os.write(fd, text.encode())


def format_interval(seconds):
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class ProgressBar:
    """tqdm's output on a non-tty stderr: every refresh starts with \\r, close() ends with \\n."""

    BLOCKS = " " + "".join(chr(c) for c in range(0x258F, 0x2587, -1))

    def __init__(self, desc, total, bar_format=None):
        self.desc, self.total, self.bar_format = desc, total, bar_format
        self.start = time.time()
        self.last_len = 0
        self.n = 0

    def _render(self):
        elapsed = time.time() - self.start
        rate = self.n / elapsed if self.n and elapsed > 0 else None
        remaining = format_interval((self.total - self.n) / rate) if rate else "?"
        if rate is None:
            rate_fmt = "?it/s"
        elif rate >= 1:
            rate_fmt = f"{rate:5.2f}it/s"
        else:
            rate_fmt = "%5.2fs/it" % (1 / rate)
        frac = self.n / self.total if self.total else 1.0
        fields = {"desc": self.desc, "percentage": frac * 100, "n_fmt": self.n, "total_fmt": self.total,
                  "elapsed": format_interval(elapsed), "remaining": remaining, "rate_fmt": rate_fmt}
        if self.bar_format:
            return self.bar_format.format(**fields)
        full, partial = divmod(int(frac * 10 * 8), 8)
        blocks = self.BLOCKS[-1] * full
        if full < 10:
            blocks += self.BLOCKS[partial] + " " * (10 - full - 1)
        return "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]".format(
            bar=blocks, **fields)

    def refresh(self):
        text = self._render()
        write_line(2, "\r" + text + " " * max(self.last_len - len(text), 0))
        self.last_len = len(text)

    def update(self, desc=None):
        self.n += 1
        if desc:
            self.desc = desc
        self.refresh()

    def close(self):
        self.refresh()
        write_line(2, "\n")


def scheduler_prefix(args, dp_rank, tp_rank):
    """The scheduler's log prefix (DP, then TP), also the tail of its process title."""
    return (f" DP{dp_rank}" if args.dp_size > 1 else "") + \
        (f" TP{tp_rank}" if args.tp_size > 1 or args.dp_size > 1 else "")
