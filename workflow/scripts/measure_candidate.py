import io
import sys

# The job's log, opened once in append mode: this script's messages and the sandboxed workers' output (copied
# from their pipes by the parent) both land there, in order.
log = open(snakemake.log[0], "ab", buffering=0)
sys.stderr = io.TextIOWrapper(log, write_through=True)

from infbench import operator_secret
from infbench.compression import held_out, verification
from infbench.compression.accuracy import GateJob
from infbench.compression.measure import LikelihoodSet
from infbench.config.model import AnswerSettings, SandboxSettings, VerificationSettings
from infbench.resources import check_visible_gpus

# Fewer GPUs than the source needs would fail the candidate's load and record that as its failure.
if snakemake.resources.gpu:
    check_visible_gpus(snakemake.resources.gpu, "verification.device")

secret = operator_secret.for_job(snakemake.config["operator_secret"], snakemake.params.secret)
answers = AnswerSettings.model_validate(snakemake.params.answers)
verification.measure_for_pipeline(
    snakemake.params.package,
    snakemake.wildcards.source,
    source_checkpoint=snakemake.input.checkpoint,
    source_record=snakemake.input.record,
    scored=LikelihoodSet(
        continuations=snakemake.input.continuations,
        reference_scores=snakemake.input.reference,
        reference_top=snakemake.input.reference_top,
    ),
    settings=VerificationSettings.model_validate(snakemake.params.settings),
    sandbox=SandboxSettings.model_validate(snakemake.params.sandbox),
    threads=snakemake.threads,
    out=snakemake.output[0],
    secret=secret,
    sample_temperature=snakemake.params.temperature,
    worker_log=log,
    memory_limit_gib=snakemake.params.memory_limit_gib,
    gate=GateJob(
        answers=answers,
        reference_json=snakemake.input.answers_reference,
        source_checkpoint=snakemake.input.checkpoint,
        label=snakemake.wildcards.candidate,
        question_seed=held_out.question_seed(secret, answers.seed),
    ),
)
