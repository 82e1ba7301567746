import logging
import sys

sys.stderr = open(snakemake.log[0], "w")
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

from infbench import operator_secret
from infbench.compression import accuracy, held_out
from infbench.config.model import AnswerSettings, SandboxSettings
from infbench.resources import check_visible_gpus

if snakemake.resources.gpu:
    check_visible_gpus(snakemake.resources.gpu, "answers.device")

answers = AnswerSettings.model_validate(dict(snakemake.params.answers))
secret = operator_secret.for_job(snakemake.config["operator_secret"], snakemake.params.secret)
accuracy.compute_reference(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    answers,
    snakemake.output.reference,
    snakemake.output.item_records,
    question_seed=held_out.question_seed(secret, answers.seed),
    sandbox=SandboxSettings.model_validate(dict(snakemake.params.sandbox)),
    secret_label=secret.label,
    threads=snakemake.threads,
)
