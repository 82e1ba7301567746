"""How long Snakemake takes to decide that nothing needs to run (a no-op rerun).

A working directory whose every output is up to date is made without running any job's
work: a Snakefile that includes the workflow and gives each rule code that only creates
its outputs, empty (directories for ``directory()`` outputs). Snakemake records its
metadata (params, with each rule's ``code`` digest) as after a real run, so its rerun
triggers see that working directory as they would see a finished one. The rerun tests
plan edits against it; this benchmark times ``snakemake -n`` there with the real Snakefile.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from infbench import atomic

STUB_SNAKEFILE = "Snakefile.outputs-only"
_STUB = """# Every rule of the workflow, its work replaced by creating its outputs empty (infbench.perf.noop_rerun).
include: "Snakefile"

from pathlib import Path as _Path
from snakemake.benchmark import benchmarked as _benchmarked
from snakemake.io import is_flagged as _is_flagged


def _outputs_creator(directories):
    def create_outputs(input, output, params, wildcards, threads, resources, log, rule, conda_env, container_img,
                       singularity_args, use_singularity, env_modules, bench_record, *rest):
        with _benchmarked(benchmark_record=bench_record) if bench_record is not None else open(__file__):
            for path, is_directory in zip(output, directories):
                if is_directory:
                    _Path(path).mkdir(parents=True, exist_ok=True)
                else:
                    _Path(path).parent.mkdir(parents=True, exist_ok=True)
                    _Path(path).write_text("")

    return create_outputs


for _rule in workflow.rules:
    if _rule.name != "all":
        _rule.run_func = _outputs_creator([_is_flagged(f, "directory") for f in _rule.output])
"""


def snakemake_executable() -> str:
    return str(Path(sys.executable).with_name("snakemake"))


def write_stub_snakefile(workflow_root: Path) -> Path:
    """``Snakefile.outputs-only`` beside ``workflow_root``'s Snakefile (it includes that one)."""
    path = Path(workflow_root) / STUB_SNAKEFILE
    path.write_text(_STUB)
    return path


def make_up_to_date(
    workflow_root: Path, workdir: Path, configfile: Path, env: dict | None = None, targets: tuple[str, ...] = ("all",)
) -> subprocess.CompletedProcess:
    """Run the outputs-only workflow in ``workdir``: afterwards every output of ``targets`` is up to date for
    the real Snakefile of ``workflow_root``."""
    stub = write_stub_snakefile(workflow_root)
    return subprocess.run(
        [
            snakemake_executable(),
            "--snakefile",
            str(stub),
            "--directory",
            str(workdir),
            "--cores",
            "2",
            *targets,
            "--configfile",
            str(configfile),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=1800,
    )


def dry_run(
    workflow_root: Path, workdir: Path, configfile: Path, env: dict | None = None, targets: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            snakemake_executable(),
            "-n",
            "--snakefile",
            str(Path(workflow_root) / "Snakefile"),
            "--directory",
            str(workdir),
            *targets,
            "--configfile",
            str(configfile),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def run(workflow_root: Path, configfile: Path, workdir: Path, *, repeats: int = 5, out_md: str | None = None) -> str:
    """Make ``workdir`` up to date for ``configfile``, then time ``repeats`` dry runs; a Markdown table."""
    workflow_root, workdir = Path(workflow_root).resolve(), Path(workdir).resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(workflow_root / "src"), os.environ.get("PYTHONPATH", "")])}
    start = time.monotonic()
    make_up_to_date(workflow_root, workdir, configfile, env)
    setup_s = time.monotonic() - start
    rows = []
    for i in range(repeats):
        start = time.monotonic()
        proc = dry_run(workflow_root, workdir, configfile, env)
        rows.append(
            {
                "run": i + 1,
                "seconds": round(time.monotonic() - start, 2),
                "nothing to be done": "Nothing to be done" in proc.stdout + proc.stderr,
            }
        )
    table = pd.DataFrame(rows)
    median = statistics.median(table["seconds"])
    text = (
        f"`snakemake -n` on an up-to-date working directory ({configfile}; made in {setup_s:.0f} s)\n\n"
        f"{table.to_markdown(index=False)}\n\nmedian {median:.2f} s\n"
    )
    if out_md:
        atomic.write_text(out_md, text)
    return text
