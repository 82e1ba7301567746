"""Building blocks of the CompressionBench verification tests: settings, the honest python-runtime package,
a tiny source with its likelihood sets (built by the real pipeline functions), packaging and one measurement."""

import shutil
import textwrap
from pathlib import Path

import torch
import yaml

from infbench import operator_secret
from infbench.compression import contexts, likelihood
from infbench.compression.accuracy import GateJob
from infbench.compression.client import EmptyWorkers
from infbench.compression.measure import EvaluationSettings, LikelihoodSet, MeasureJob, measure
from infbench.config.model import CorpusSpec

SETTINGS = EvaluationSettings(
    device="cpu",
    threads=1,
    timeout_s=120,
    runtime_allowance_mib=16,
    score_batch_size=4,
    bootstrap_resamples=100,
    seed=0,
    decode={"prompt_tokens": 8, "output_tokens": 4, "rounds": 1, "requests_per_round": 2, "warmup": 0},
    integrity={"statefulness_rows": 2, "tolerance": 0.05, "likelihood_alpha": 0.001},
    sandbox={"allow_unsandboxed": False, "tmp_mb": 256},
    memory_workspace={"logits_copies": 3, "extra_mib": 256},
)
# One empty worker per runtime for the session's measurements, as a caller verifying several packages keeps
# (the first measurement runs its empty worker beside the package's, as every pipeline job does)
EMPTY_WORKERS = EmptyWorkers()
SECRET = operator_secret.load({"env": "INFBENCH_TEST_NO_SUCH_VARIABLE", "file": None, "require": False})

# The honest python-runtime package: each row's whole sequence through the model for every answer (no cache), so
# obviously causal and row-independent.
HONEST = """
import numpy as np, torch
from pathlib import Path
from transformers import AutoModelForCausalLM

class Model:
    def __init__(self, package_dir, device):
        self.model = AutoModelForCausalLM.from_pretrained(Path(package_dir) / "model").eval()
        self.rows = []

    @torch.inference_mode()
    def last_logits(self, rows):
        return np.stack(
            [self.model(input_ids=torch.as_tensor([r]), logits_to_keep=1).logits[0, -1].float().numpy() for r in rows]
        )

    def prefill(self, rows, max_new_tokens):
        self.rows = [list(r) for r in rows]
        return self.last_logits(self.rows)

    def step(self, tokens, rows):
        for token, row in zip(tokens, rows):
            self.rows[row].append(int(token))
        return self.last_logits([self.rows[row] for row in rows])

    def release(self):
        self.rows = []

def load(package_dir, device):
    return Model(package_dir, device)
"""


def make_package(root: Path, source_dir: Path, code: str, **manifest) -> Path:
    pkg = root / manifest.get("name", "pkg")
    shutil.copytree(source_dir / "hf", pkg / "model")
    (pkg / "inference.py").write_text(textwrap.dedent(code))
    fields = {
        "name": "pkg",
        "source": "tiny",
        "runtime": "python",
        "weights": "model",
        "tokenizer": "model",
        "entrypoint": "inference.py:load",
        **manifest,
    }
    (pkg / "manifest.yaml").write_text(yaml.safe_dump({k: v for k, v in fields.items() if v is not None}))
    return pkg


def measure_job(pkg: Path, src: Path, settings=SETTINGS, **fields) -> MeasureJob:
    """The final verification of ``pkg`` against the tiny source ``src`` (``fields``: gate, memory_limit_gib...)."""
    return MeasureJob(
        kind="verification",
        package=pkg,
        source="tiny",
        source_checkpoint=str(src / "hf"),
        n_params=1_600_000,
        vocab_size=49152,
        scored=LikelihoodSet(
            continuations=str(src / "verification/continuations.parquet"),
            reference_scores=str(src / "verification/reference_scores.parquet"),
            reference_top=str(src / "verification/reference_top.npz"),
        ),
        settings=settings,
        secret=SECRET,
        sample_temperature=1.0,
        **fields,
    )


def run(pkg: Path, src: Path, settings=SETTINGS, *, empty_workers=EMPTY_WORKERS, log=None, **fields):
    """``pkg`` measured as a verification job does; by default against the session's kept empty worker."""
    return measure(measure_job(pkg, src, settings, **fields), log=log, empty_workers=empty_workers)


def answers_settings(n_questions: int = 1, **max_new_tokens):
    """The embedded gate with ``n_questions`` per benchmark and 4 new tokens each (``max_new_tokens``: per
    benchmark instead), ``A(p)`` in float32 (the tiny source's precision)."""
    from conftest import embedded_config

    from infbench.config.model import AnswerSettings

    cfg = embedded_config()
    cfg["answers"]["dtype"] = "float32"
    for bench in ("gsm8k", "humaneval", "triviaqa"):
        cfg["answers"][bench].update(n_questions=n_questions, max_new_tokens=max_new_tokens.get(bench, 4))
    return AnswerSettings.model_validate(cfg["answers"])


def source_reference(settings, out: Path, src: Path, question_seed: int = 0) -> Path:
    """The tiny source's ``A(p)`` (as the pipeline computes it) on the questions ``question_seed`` draws."""
    from infbench.compression.accuracy import compute_reference

    compute_reference(
        "tiny",
        src / "hf",
        settings,
        out / "reference.json",
        out / "reference_items.parquet",
        question_seed=question_seed,
        sandbox=SETTINGS.sandbox,
    )
    return out / "reference.json"


def reference_answers(settings, path: Path, answer: str = "42") -> Path:
    """A stand-in ``A(p)`` file: every question of ``settings`` answered ``answer`` (no answer tokens kept)."""
    from infbench.evaluation import driver, results
    from infbench.evaluation.questions import load_questions

    reference = driver.evaluate(
        lambda batch, n, stop: [answer] * len(batch),
        load_questions(settings, seed=0),
        settings,
        label="source",
        sandbox=SETTINGS.sandbox,
    )
    results.write_json(path, reference)
    return path


def gate_job(answers, reference_json: Path, src: Path, question_seed: int = 0) -> GateJob:
    return GateJob(
        answers=answers,
        reference_json=str(reference_json),
        source_checkpoint=str(src / "hf"),
        label="c",
        question_seed=question_seed,
    )


def build_tiny_source(out: Path, smollm2_dir: Path, *, hidden_size: int = 32, heads: int = 4) -> Path:
    """A tiny Llama with SmolLM2's tokenizer under ``out``, its search and verification sets and reference scores
    (``hidden_size / heads``: its head size; vLLM's CPU attention takes 32 and more, not the default 8)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=49152,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=2,
            num_attention_heads=heads,
            num_key_value_heads=heads // 2 or 1,
            max_position_embeddings=512,
            tie_word_embeddings=True,
        )
    )
    model.save_pretrained(out / "hf")
    AutoTokenizer.from_pretrained(smollm2_dir / "hf").save_pretrained(out / "hf")
    common = dict(backend="transformers", dtype="float32", device="cpu")
    for set_name in contexts.SET_NAMES:  # search first: the verification set is drawn from what it left
        d = out / set_name
        d.mkdir()
        contexts.build(
            "tiny",
            out / "hf",
            smollm2_dir / "source.json",
            d / "contexts.parquet",
            d / "contexts.json",
            set_name=set_name,
            corpus=CorpusSpec(type="embedded"),
            contexts_per_set=4,
            context_tokens=16,
            continuation_tokens=8,
            seed=0,
            secret=SECRET,
            search_contexts=out / "search/contexts.parquet",
        )
        likelihood.sample_set(
            "tiny",
            str(out / "hf"),
            str(d / "contexts.parquet"),
            set_name,
            str(d / "continuations.parquet"),
            str(d / "sampling.json"),
            n_tokens=8,
            temperature=1.0,
            seed=0,
            batch_size=4,
            secret=SECRET,
            **common,
        )
        likelihood.score_reference(
            "tiny",
            str(out / "hf"),
            str(d / "continuations.parquet"),
            str(d / "reference_scores.parquet"),
            str(d / "reference.json"),
            str(d / "reference_top.npz"),
            top_k=16,
            batch_size=4,
            bootstrap_resamples=100,
            seed=0,
            secret=SECRET,
            **common,
        )
    return out
