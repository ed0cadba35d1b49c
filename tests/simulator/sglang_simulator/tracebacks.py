"""Fake tracebacks: SGLang's and torch's call stacks as a scheduler logs them ("Scheduler hit an exception: ..."),
and the exception that carries one up to Scheduler.run."""

SITE = "/usr/local/lib/python3.12/dist-packages"


def fake_traceback(frames, error):
    """A traceback of frames (path, line, function, code); paths are under sglang/srt/ unless they name their
    package (``sglang/...``, ``torch/...``)."""
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        package = "" if path.startswith(("sglang/", "torch/")) else "sglang/srt/"
        lines.append(f'  File "{SITE}/{package}{path}", line {line}, in {func}')
        lines.append("    " + code)
    return "\n".join(lines) + "\n" + error


SCHEDULER_FRAMES = [
    ("managers/scheduler.py", 2914, "run_scheduler_process", "scheduler = Scheduler("),
    ("managers/scheduler.py", 351, "__init__", "self.tp_worker = TpModelWorker("),
    ("managers/tp_worker.py", 95, "__init__", "self.model_runner = ModelRunner("),
]


class SchedulerFailure(Exception):
    """Carries the traceback text the scheduler logs as 'Scheduler hit an exception'."""
