# The one path from config to jobs: the config validated and typed (CFG), what it plans (PLAN), where results
# live (LAYOUT), and the helpers every rule file uses. The rules read only these, so the order the rule files
# are included in does not matter.
import os
import re
import sys

from snakemake.utils import validate

from infbench import code_digest, operator_secret, preflight, resources
from infbench.config import files as config_files
from infbench.errors import ConfigError, InfbenchError
from infbench.layout import LAYOUT
from infbench import plan as planning


def _set_resources():
    """rule -> resource -> value of --set-resources and the workflow profile's set-resources."""
    overrides = workflow.resource_settings.overwrite_resources
    return {name: {key: getattr(r, "value", r) for key, r in mapping.items()} for name, mapping in overrides.items()}


_GPU_LIMIT = workflow.resource_settings.resources.get("gpu")
_CONFIG_FILES = [str(f) for f in workflow.overwrite_configfiles] or ["config/config.yaml"]


def _stop(error):
    """A bad config or submission stops the workflow before any job with one line naming file and key."""
    print(f"infbench: error: {error}", file=sys.stderr)
    sys.exit(2)


# The config as typed sections (src/infbench/config/), then the checks of the machine, the tracks and the
# submissions (src/infbench/preflight.py): a bad config stops here, naming the file and the key, before any job.
try:
    CFG = config_files.typed(config, _CONFIG_FILES)
    preflight.check(CFG, preflight.GpuBudget(_set_resources(), getattr(_GPU_LIMIT, "value", _GPU_LIMIT)))
    PLAN = planning.build(CFG)
    preflight.submissions(PLAN.submissions, PLAN.serving_submissions, CFG)
except ConfigError as error:
    _stop(error if error.where else error.read_from(", ".join(_CONFIG_FILES)))
except InfbenchError as error:
    _stop(error)
for _missing in preflight.outside(CFG):
    # what only a job needs from outside the repository (llama.cpp's converter): planned without it, one line
    # here; the job needing it (source_model, before it downloads) fails naming the key
    print(f"infbench: note: {_missing.read_from(', '.join(_CONFIG_FILES))}", file=sys.stderr)
validate(config, schema="../schemas/config.schema.yaml")  # fills the defaults the rules read from `config`
SERVING = CFG.serving

# Held-out material is drawn from the operator secret (src/infbench/operator_secret.py); rules get its
# fingerprint only (a changed secret reruns what depends on it), jobs load the secret themselves.
SECRET = operator_secret.load(CFG.operator_secret).fingerprint
SETS = planning.SETS


wildcard_constraints:
    source="|".join(map(re.escape, PLAN.sources)),
    set="|".join(planning.SETS),
    candidate="[A-Za-z0-9._-]+",
    qtype="[A-Za-z0-9_]+",
    limit="[0-9.]+",
    task="[A-Za-z0-9._-]+",
    run="[A-Za-z0-9._-]+",
    system="[A-Za-z0-9._-]+",
    seed="[0-9]+",
    submission="[A-Za-z0-9._-]+",
    engine="[A-Za-z0-9._-]+",


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


def gpus(rule):
    """The `gpu` resource of a per-source rule: the GPUs its config puts it on (src/infbench/resources.py)."""
    return lambda wildcards: resources.job_gpus(CFG, rule, wildcards.source)


# Scale-out (docs/slurm.md, docs/paper_scale.md): every rule declares threads and resources (mem_mb and
# runtime in minutes sized for the embedded default, gpu from the config); profiles/paper raises memory and
# runtime for the paper sources. A verification job's worker has verification.timeout_s for everything
# (load, likelihood, probes, decode, accuracy gate); the job around it a half hour more.
VERIFICATION_MINUTES = int(CFG.verification.timeout_s / 60) + 30
LIKELIHOOD_ENV = (
    "../../envs/pipeline.yaml"
    if CFG.likelihood.backend != "vllm"
    else "../../envs/vllm-cpu.yaml" if CFG.likelihood.device == "cpu" else "../../envs/vllm.yaml"
)


# Input and parameter functions of the rules (Snakemake's lint: functions live here, rules in their stage's file).


def sets_drawn_before(wildcards):
    """The verification set is drawn after the search set, from the documents it left."""
    if wildcards.set == "verification":
        return [LAYOUT.contexts(wildcards.source, "search")]
    return []


def secret_of_set(wildcards):
    """The secret's fingerprint for the verification set's jobs; the search set follows public seeds."""
    return SECRET if wildcards.set == "verification" else None


def candidate_code(wildcards):
    """measure_candidate's code: its script's, and what a submission's own Python files import from infbench."""
    package = PLAN.candidate_inputs(wildcards.source, wildcards.candidate)
    return code("measure_candidate", also_files=package if isinstance(package, list) else [])


def serving_trace():
    """The trace the workload is read from: the synthetic one this workflow writes, or the configured file."""
    trace = SERVING.workload.trace
    return LAYOUT.synthetic_trace() if trace.format == "synthetic" else trace.path


def submission_files(wildcards):
    """A submission's files (links never followed): editing one reruns its verification."""
    from infbench.serving.verify import submission as server_submission

    return server_submission.files(PLAN.serving_submissions[wildcards.submission])


# At the end of a successful run: the verdicts and scores of the tables that exist (src/infbench/summary.py).
onsuccess:
    from infbench import summary  # its imports (pandas, the table rows) only after a run

    summary.print_summary(LAYOUT.root)


def serving_view(*servers):
    """The serving section as a job uses it that launches `servers` (ServingCore.for_servers): the verification
    settings, the submission directories, the tables' uncertainty settings and the other servers' specs do not
    rerun it."""
    return SERVING.for_servers(*servers).model_dump(mode="json")
