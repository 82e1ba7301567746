"""The program inside a judge sandbox (:mod:`infbench.sandbox.judge`): standard library only.

The parent runs this file's text as ``python -I -S -c <text> ROLE FD...``; nothing of infbench is importable
inside. Each role first reads one JSON object on stdin (from the parent), then sets its resource limits
(``limits``: address space, CPU seconds, file size, open files, no core dumps), then runs.

``candidate CALLS_FD ANSWERS_FD``: runs ``program`` (untrusted: model output) as ``__main__`` and serves its
function ``entry_point``. Its first line on ``ANSWERS_FD`` is ``('ready',)`` or ``('load_failed', reason)``;
then, for every line ``repr((args, kwargs))`` read from ``CALLS_FD``, one line ``repr(('ok', result))`` or
``repr(('raised', exception type name, message))``. Nothing it writes is believed beyond being a Python
literal: this process is the tested code's, and may be replaced by it entirely.

``checker ANSWERS_FD CALLS_FD VERDICT_FD``: runs trusted code, ``helpers`` (the problem's prompt: its imports
and helper functions) and ``test`` (defining ``check``), with ``entry_point`` bound to a proxy that sends each
call to the candidate and parses each answer with :func:`ast.literal_eval` (a value, never an object with
methods of the candidate's making), then calls ``check(proxy)``. It writes one JSON line on ``VERDICT_FD``, which
only it
holds: ``{"passed": true}`` iff ``check`` returned and every call got a well-formed answer, else the reason.
"""

import ast
import builtins
import json
import os
import resource
import sys

MAX_LINE = 16 << 20  # the longest call or answer line, in characters
REASON_CHARS = 500


def _limit(limits: dict) -> None:
    for name, value in (
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_CPU", limits["cpu_s"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_NOFILE", limits["open_files"]),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))


def _described(exc: BaseException) -> str:
    text = str(exc)
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:REASON_CHARS]


def _send(stream, message) -> None:
    stream.write(repr(message) + "\n")
    stream.flush()


def candidate(calls_fd: int, answers_fd: int, job: dict) -> None:
    calls = os.fdopen(calls_fd, "r", encoding="utf-8", newline="\n")
    answers = os.fdopen(answers_fd, "w", encoding="utf-8", newline="\n")
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(job["program"], "candidate.py", "exec"), namespace)
        function = namespace[job["entry_point"]]
    except BaseException as exc:  # noqa: BLE001 -- whatever the program does is its outcome
        _send(answers, ("load_failed", _described(exc)))
        return
    _send(answers, ("ready",))
    while line := calls.readline(MAX_LINE):
        args, kwargs = ast.literal_eval(line)
        try:
            answer = ("ok", function(*args, **kwargs))
            text = repr(answer)
        except BaseException as exc:  # noqa: BLE001
            text = repr(("raised", type(exc).__name__, str(exc)[:REASON_CHARS]))
        answers.write(text + "\n")
        answers.flush()


class CandidateLost(BaseException):
    """The candidate broke the call protocol (exited, answered nothing parseable). A BaseException, so that a
    test's ``except Exception`` cannot swallow it; the checker also remembers it (:attr:`Proxy.lost`)."""


class Proxy:
    """The candidate's entry point as ``check`` sees it: every call goes over the pipe to the candidate."""

    def __init__(self, answers, calls):
        self.answers, self.calls, self.n, self.lost = answers, calls, 0, ""

    def receive(self, what: str):
        line = self.answers.readline(MAX_LINE)
        if not line:
            self._lose(f"the candidate exited before {what}")
        if not line.endswith("\n"):
            self._lose(f"the candidate's answer to {what} is longer than {MAX_LINE} characters")
        try:
            message = ast.literal_eval(line)
        except Exception as exc:  # noqa: BLE001
            self._lose(f"the candidate's answer to {what} is not a Python literal ({type(exc).__name__})")
        if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
            self._lose(f"the candidate's answer to {what} is malformed")
        return message

    def _lose(self, reason: str):
        self.lost = self.lost or reason
        raise CandidateLost(self.lost)

    def __call__(self, *args, **kwargs):
        if self.lost:
            raise CandidateLost(self.lost)
        self.n += 1
        request = repr((args, kwargs))
        try:
            sendable = ast.literal_eval(request) == (args, kwargs)
        except Exception:  # noqa: BLE001
            sendable = False
        if not sendable:
            raise TypeError(f"call {self.n}: its arguments are not Python literals, the judge cannot send them")
        self.calls.write(request + "\n")
        self.calls.flush()
        message = self.receive(f"call {self.n}")
        if message[0] == "ok" and len(message) == 2:
            return message[1]
        if message[0] == "raised" and len(message) == 3 and all(isinstance(m, str) for m in message[1:]):
            kind = getattr(builtins, message[1], None)
            kind = kind if isinstance(kind, type) and issubclass(kind, Exception) else RuntimeError
            raise kind(f"the candidate raised {message[1]}: {message[2]}")
        self._lose(f"the candidate's answer to call {self.n} is malformed")


def checker(answers_fd: int, calls_fd: int, verdict_fd: int, job: dict) -> None:
    verdict = os.fdopen(verdict_fd, "w", encoding="utf-8")
    proxy = Proxy(
        os.fdopen(answers_fd, "r", encoding="utf-8", newline="\n"),
        os.fdopen(calls_fd, "w", encoding="utf-8", newline="\n"),
    )
    try:
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        exec(compile(job["helpers"], "prompt.py", "exec"), namespace)
        namespace[job["entry_point"]] = proxy
        exec(compile(job["test"], "test.py", "exec"), namespace)
        first = proxy.receive("loading")
        if first[0] != "ready":
            reason = first[1] if first[0] == "load_failed" and len(first) == 2 else "malformed"
            raise CandidateLost(f"the program did not load: {str(reason)[:REASON_CHARS]}")
        namespace["check"](proxy)
        result = {"passed": not proxy.lost, "reason": proxy.lost, "calls": proxy.n}
    except CandidateLost as exc:
        result = {"passed": False, "reason": str(exc), "calls": proxy.n}
    except BaseException as exc:  # noqa: BLE001 -- a failed assertion, or what the candidate's answers caused
        result = {"passed": False, "reason": proxy.lost or _described(exc), "calls": proxy.n}
    verdict.write(json.dumps(result) + "\n")
    verdict.flush()


def main() -> None:
    role, fds = sys.argv[1], [int(fd) for fd in sys.argv[2:]]
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    sys.set_int_max_str_digits(0)  # a long integer is an answer like any other
    _limit(job["limits"])
    {"candidate": candidate, "checker": checker}[role](*fds, job)


if __name__ == "__main__":
    main()
