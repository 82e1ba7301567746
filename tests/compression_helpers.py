"""Building blocks of the CompressionBench verification tests: settings, the honest python-runtime package,
a tiny source with its likelihood sets (built by the real pipeline functions), packaging and one measurement."""

import shutil
import textwrap
from pathlib import Path

import torch
import yaml

from infbench import operator_secret
from infbench.compression import contexts, likelihood
from infbench.compression.client import EmptyWorkers
from infbench.compression.evaluation import EvaluationSettings, measure
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
    integrity={
        "probe_requests": 1,
        "statefulness_rows": 2,
        "tolerance": 0.05,
        "tie_margin": 0.01,
        "greedy_tokens": 6,
        "likelihood_alpha": 0.001,
    },
    sandbox={"allow_unsandboxed": False, "tmp_mb": 256},
    memory_workspace={"logits_copies": 3, "extra_mib": 256},
)
# One empty worker per runtime for the session's measurements, as a caller verifying several packages keeps
# (the first measurement runs its empty worker beside the package's, as every pipeline job does)
EMPTY_WORKERS = EmptyWorkers()
SECRET = operator_secret.load({"env": "INFBENCH_TEST_NO_SUCH_VARIABLE", "file": None, "require": False})

HONEST = """
import numpy as np, torch
from pathlib import Path
from transformers import AutoModelForCausalLM

class Model:
    def __init__(self, package_dir, device):
        self.model = AutoModelForCausalLM.from_pretrained(Path(package_dir) / "model").eval()

    @torch.inference_mode()
    def logits(self, input_ids, n_last):
        return self.model(input_ids=torch.as_tensor(input_ids), logits_to_keep=n_last).logits.float().numpy()

    @torch.inference_mode()
    def generate(self, input_ids, max_new_tokens):
        ids = list(input_ids)
        for _ in range(max_new_tokens):
            tok = int(self.model(input_ids=torch.as_tensor([ids])).logits[0, -1].argmax())
            ids.append(tok)
            yield tok

    def release(self):
        pass

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


def run(pkg: Path, src: Path, settings=SETTINGS, **kwargs):
    kwargs.setdefault("empty_workers", EMPTY_WORKERS)
    return measure(
        "verification",
        pkg,
        "tiny",
        source_checkpoint=str(src / "hf"),
        n_params=1_600_000,
        vocab_size=49152,
        continuations=str(src / "verification/continuations.parquet"),
        reference_scores=str(src / "verification/reference_scores.parquet"),
        reference_top=str(src / "verification/reference_top.npz"),
        settings=settings,
        secret=SECRET,
        sample_temperature=1.0,
        **kwargs,
    )


def build_tiny_source(out: Path, smollm2_dir: Path) -> Path:
    """A tiny Llama with SmolLM2's tokenizer under ``out``, its search and verification sets and reference scores."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=49152,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
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
