# Config validation and the helpers that turn config into rule inputs.
import os
import re

from snakemake.utils import validate

from infbench import code_digest, operator_secret, resources
from infbench.config import model as config_model
from infbench.config.checks import GpuBudget


validate(config, schema="../schemas/config.schema.yaml")

SOURCES = sorted(config["sources"])
SETS = ["search", "verification"]




def _set_resources():
    """rule -> resource -> value of --set-resources and the workflow profile's set-resources."""
    overrides = workflow.resource_settings.overwrite_resources
    return {
        name: {key: getattr(r, "value", r) for key, r in mapping.items()}
        for name, mapping in overrides.items()
    }


_GPU_LIMIT = workflow.resource_settings.resources.get("gpu")
# The config as typed sections, with every start-of-run check (src/infbench/config/checks.py): a bad config
# stops here, naming the key, before any job.
CFG = config_model.parse(
    config, GpuBudget(_set_resources(), getattr(_GPU_LIMIT, "value", _GPU_LIMIT))
)

# Held-out material is drawn from the operator secret (src/infbench/operator_secret.py); rules get its
# fingerprint only (a changed secret reruns what depends on it), jobs load the secret themselves.
OPERATOR_SECRET = operator_secret.load(config["operator_secret"])

# Scale-out (docs/slurm.md, docs/paper_scale.md): every rule declares threads
# and resources (mem_mb and runtime in minutes sized for the embedded default, gpu
# from the config); profiles/paper raises memory and runtime for the paper sources.


def gpus(rule):
    """The `gpu` resource of a per-source rule: the GPUs its config puts it on (src/infbench/resources.py)."""
    return lambda wildcards: resources.job_gpus(CFG, rule, wildcards.source)


# A verification job's worker has verification.timeout_s for everything (load, likelihood, probes, decode,
# accuracy gate); the job around it a half hour more.
VERIFICATION_MINUTES = int(config["verification"]["timeout_s"] / 60) + 30
LIKELIHOOD_ENV = (
    "../../envs/vllm.yaml"
    if config["likelihood"]["backend"] == "vllm"
    else "../../envs/pipeline.yaml"
)


wildcard_constraints:
    source="|".join(map(re.escape, SOURCES)),
    set="|".join(SETS),
    candidate="[A-Za-z0-9._-]+",
    qtype="[A-Za-z0-9_]+",
    limit="[0-9.]+",
    task="[A-Za-z0-9._-]+",


# Digests kept between starts while the package is unchanged (src/infbench/code_digest.py).
CODE_DIGESTS = code_digest.DigestCache(
    ".snakemake/infbench/code_digests.json",
    os.path.join(workflow.basedir, "workflow", "scripts"),
)


def code(script, also_files=(), also_modules=()):
    """The `code` parameter of the jobs running workflow/scripts/<script>.py, a digest of the package
    code the script reaches (src/infbench/code_digest.py), so that an edit under src/infbench/ reruns
    exactly the jobs that run it. `also_files` are Python and YAML files the job runs besides (a
    submission's), `also_modules` package modules it launches by name (server commands)."""
    return CODE_DIGESTS.digest(
        script,
        also_files=[f for f in also_files if f.endswith((".py", ".yaml", ".yml"))],
        also_modules=also_modules,
    )


def source_dir(wildcards):
    return f"results/sources/{wildcards.source}/hf"


def sets_drawn_before(wildcards):
    """The verification set is drawn after the search set, from the documents it left."""
    if wildcards.set == "verification":
        return [f"results/likelihood/{wildcards.source}/search/contexts.parquet"]
    return []


def secret_of_set(wildcards):
    """The secret's fingerprint for the verification set's jobs; the search set follows public seeds."""
    return OPERATOR_SECRET.fingerprint if wildcards.set == "verification" else None


# CompressionBench tasks and candidates ------------------------------------
from infbench.compression import tasks as compression_tasks

TASKS = compression_tasks.tasks(config)
# The starter code ships with the workflow, wherever the working directory is.
STARTER_CODE = [
    os.path.join(workflow.basedir, "examples", "starter_submission", name)
    for name in ("manifest.yaml", "inference.py")
]
COMPRESSION = config["compression"]
SUBMISSIONS = compression_tasks.submission_dirs(COMPRESSION["submissions_dir"])


def candidates(source):
    """Candidate names verified for ``source``: baselines, then user submissions."""
    names = ["bf16"] if COMPRESSION["bf16"] else []
    names += ["starter"] if COMPRESSION["starter"] else []
    names += [f"gguf-{t}" for t in COMPRESSION["gguf_types"]]
    names += [
        f"released-{n}"
        for n, r in COMPRESSION["released_gguf"].items()
        if r["source"] == source
    ]
    if COMPRESSION["gptq"]["enabled"]:
        names += [
            f"gptq-{t.limit_gib:g}gib" for t in TASKS.values() if t.source == source
        ]
    names += [
        name
        for name, path in SUBMISSIONS.items()
        if compression_tasks.declared_source(path) in (source, None)
    ]
    names += [c for c, run in RUN_CANDIDATES.items() if run.source == source]
    return names


def candidate_package(wildcards):
    """A user submission's files (so editing any of them reruns it), or a built baseline."""
    if wildcards.candidate in SUBMISSIONS:
        root = SUBMISSIONS[wildcards.candidate]
        return sorted(str(p) for p in root.rglob("*") if p.is_file())
    if wildcards.candidate in RUN_CANDIDATES:  # a run's final submission (runs.smk)
        return RUN_CANDIDATES[wildcards.candidate].final_inputs
    return f"results/candidates/{wildcards.source}/{wildcards.candidate}"


def candidate_code(wildcards):
    """measure_candidate's code: its script's, and what a submission's own Python files import from infbench."""
    package = candidate_package(wildcards)
    return code("measure_candidate", also_files=package if isinstance(package, list) else [])


def candidate_dir(wildcards):
    if wildcards.candidate in SUBMISSIONS:
        return str(SUBMISSIONS[wildcards.candidate])
    if wildcards.candidate in RUN_CANDIDATES:
        return RUN_CANDIDATES[wildcards.candidate].final
    return f"results/candidates/{wildcards.source}/{wildcards.candidate}"
SERVING = config.get("serving")


def _replay_minutes(serving):
    replay = serving["replay"]
    return (replay["warmup_s"] + replay["window_s"] + replay["request_timeout_s"]) / 60


# Scheduler time limits of the serving jobs, from the replay window: one replay
# (plus server start-up), or one per calibration concurrency and seed.
SERVING_GPUS = (
    SERVING["deployment"]["devices"]
    if SERVING and SERVING["deployment"]["accelerator"] == "gpu"
    else 0
)
SERVING_REPLAY_MINUTES = int(15 + _replay_minutes(SERVING)) if SERVING else 0
SERVING_CALIBRATE_MINUTES = (
    int(
        15
        + _replay_minutes(SERVING)
        * (
            len(SERVING["calibration"]["concurrencies"])
            + len(SERVING["seeds"]["calibration"])
        )
    )
    if SERVING
    else 0
)


def serving_targets():
    """The ServerBench outputs of `rule all`, when the config has a serving section."""
    if SERVING is None:
        return []
    return [
        "results/tables/serving.md",
        "results/tables/serving.csv",
        "results/plots/serving_value_share.png",
        "results/serving/coverage.csv",
        "results/tables/serving_verified.md",
    ]


def serving_trace():
    trace = SERVING["workload"]["trace"]
    if trace["format"] == "synthetic":
        return "results/serving/trace/synthetic.jsonl"
    return trace["path"]


def round_records(wildcards):
    """Every final verification record of the round: CompressionBench's and ServerBench's."""
    serving = (
        expand(
            "results/serving/verification/{submission}.json",
            submission=SERVING_SUBMISSIONS,
        )
        if SERVING is not None
        else []
    )
    return COMPRESSION_RECORDS + serving
