"""Run an untrusted Python program in a separate, limited process.

Each program runs in a fresh ``python -I`` (isolated: no ``PYTHON*``
variables, no user site, script directory not on ``sys.path``) in its own
temporary working directory, which is deleted afterwards, with:

- an environment of its own (``PATH``, ``HOME`` and ``TMPDIR`` in the
  temporary directory, a UTF-8 locale): nothing inherited, so no secrets;
- ``setrlimit`` limits, set by a small launcher that then ``exec``s the
  interpreter (so they hold for the program and whatever it starts): address space (``memory_mb``), CPU seconds
  (``timeout_s`` rounded up, plus one), written file size (16 MiB), open
  files (64), no core dumps;
- a wall-clock timeout, after which its whole process group is killed;
- stdin closed, stdout and stderr to files in the temporary directory.

Network access is not blocked (that needs namespaces or a firewall): run
untrusted completions on a machine where that does not matter.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

FILE_SIZE_LIMIT = 16 << 20
OPEN_FILES_LIMIT = 64
TAIL_CHARS = 2000


class RunOutcome(BaseModel):
    status: Literal["passed", "failed", "timed_out"]
    returncode: int | None
    detail: str  # the last line of stderr for a failure, "" when passed


# Sets the limits, then replaces itself with the isolated interpreter running the
# program: no preexec_fn, which is unsafe in a parent with threads.
LAUNCHER = """
import os, resource, sys
memory, cpu, fsize, nofile = map(int, sys.argv[1:5])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.execv(sys.executable, [sys.executable, "-I", "program.py"])
"""


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-TAIL_CHARS:]
    except OSError:
        return ""


def run_program(source: str, *, timeout_s: float, memory_mb: int) -> RunOutcome:
    """Run ``source`` as a script; ``passed`` iff it exits with status 0 within ``timeout_s``."""
    with tempfile.TemporaryDirectory(prefix="infbench-sandbox-") as tmp:
        work = Path(tmp)
        (work / "program.py").write_text(source)
        env = {"PATH": os.defpath, "HOME": tmp, "TMPDIR": tmp, "LC_ALL": "C.UTF-8"}
        with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:
            limits = (memory_mb << 20, math.ceil(timeout_s) + 1, FILE_SIZE_LIMIT, OPEN_FILES_LIMIT)
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", LAUNCHER, *map(str, limits)], cwd=tmp, env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True, close_fds=True,
            )
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                returncode = None
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        if returncode is None:
            return RunOutcome(status="timed_out", returncode=None, detail=f"timed out after {timeout_s} s")
        if returncode == 0:
            return RunOutcome(status="passed", returncode=0, detail="")
        lines = _tail(work / "stderr").strip().splitlines()
        detail = lines[-1] if lines else f"exit status {returncode}"
        if returncode < 0:
            detail = f"killed by {signal.Signals(-returncode).name}" + (f": {detail}" if lines else "")
        return RunOutcome(status="failed", returncode=returncode, detail=detail)
