"""A pytest plugin that finds what a runtime needs beyond the sandbox's system-call allowlist.

Sandboxes started by the tests get the allowlist with *log* as the default action (SCMP_ACT_LOG): every call it
would refuse goes through and the kernel logs it. At the end of the session the calls logged since it started
(``dmesg``, as root) are printed by name with the programs that made them. Run the honest tests of a runtime
this way, then add what it needs to a group of ``infbench.sandbox.seccomp.GROUPS`` (or leave it refused, as the
tests decide: uvloop's io_uring and torch's mbind fall back when refused)::

    PYTHONPATH=tests pytest -n 0 -p seccomp_log tests/compression/test_cuda_paths.py
"""

import collections
import re
import subprocess

import pyseccomp
import pytest

from infbench.sandbox import seccomp

AUDIT = re.compile(r'type=1326 .*comm="([^"]*)".*syscall=(\d+)')


def _dmesg() -> list[str]:
    out = subprocess.run(["dmesg"], capture_output=True, text=True)
    return out.stdout.splitlines() if out.returncode == 0 else []


def pytest_configure(config):
    config._seccomp_log_start = len(_dmesg())
    logging = seccomp.program.__wrapped__

    def program(profile, default=None):
        return logging(profile, pyseccomp.LOG)

    seccomp.program = program


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    calls: dict[str, set[str]] = collections.defaultdict(set)
    for line in _dmesg()[config._seccomp_log_start :]:
        if match := AUDIT.search(line):
            number = int(match.group(2))
            try:
                name = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, number).decode()
            except ValueError:
                name = str(number)
            calls[name].add(match.group(1))
    terminalreporter.section("system calls outside the sandbox's allowlist (logged, not refused)")
    for name, programs in sorted(calls.items()):
        terminalreporter.write_line(f"{name}: {', '.join(sorted(programs))}")
    if not calls:
        terminalreporter.write_line("none (or the kernel log is not readable here)")
