"""Final verification against honest and adversarial python-runtime submissions.

The "source" is a small randomly initialised Llama with SmolLM2's real
tokenizer; its likelihood sets are built with the real pipeline functions.
"""

import shutil
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from infbench.compression import contexts, likelihood
from infbench.compression.evaluation import EvaluationSettings, Task, measure, verdict
from infbench.compression.submission import GIB

pytestmark = pytest.mark.slow

SETTINGS = EvaluationSettings(
    device="cpu", threads=1, timeout_s=120, runtime_allowance_mib=16, score_batch_size=4, bootstrap_resamples=100, seed=0,
    decode={"prompt_tokens": 8, "output_tokens": 4, "rounds": 1, "requests_per_round": 2, "warmup": 0},
    integrity={"sequences": 2, "tolerance": 0.05, "tie_margin": 0.01, "greedy_tokens": 6},
    sandbox={"allow_unsandboxed": False, "tmp_mb": 256},
)

HONEST = '''
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
'''


@pytest.fixture(scope="module")
def tiny_source(tmp_path_factory, smollm2_source):
    """A tiny Llama with SmolLM2's tokenizer, its verification set and reference scores."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny_source")
    smollm2_dir, record = smollm2_source
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=512, tie_word_embeddings=True))
    model.save_pretrained(out / "hf")
    AutoTokenizer.from_pretrained(smollm2_dir / "hf").save_pretrained(out / "hf")
    contexts.build("tiny", out / "hf", smollm2_dir / "source.json", out / "contexts.parquet",
                   out / "contexts.json", corpus={"type": "embedded"}, contexts_per_set=4, context_tokens=16,
                   continuation_tokens=8, seed=0)
    common = dict(backend="transformers", dtype="float32", device="cpu")
    likelihood.sample_set("tiny", str(out / "hf"), str(out / "contexts.parquet"), "verification",
                          str(out / "cont.parquet"), str(out / "sampling.json"), n_tokens=8, temperature=1.0,
                          seed=0, batch_size=4, **common)
    likelihood.score_reference("tiny", str(out / "hf"), str(out / "cont.parquet"), str(out / "ref.parquet"),
                               str(out / "ref.json"), batch_size=4, bootstrap_resamples=100, seed=0, **common)
    return out


def make_package(root: Path, source_dir: Path, code: str, **manifest) -> Path:
    pkg = root / manifest.get("name", "pkg")
    shutil.copytree(source_dir / "hf", pkg / "model")
    (pkg / "inference.py").write_text(textwrap.dedent(code))
    fields = {"name": "pkg", "source": "tiny", "runtime": "python", "weights": "model", "tokenizer": "model",
              "entrypoint": "inference.py:load", **manifest}
    (pkg / "manifest.yaml").write_text(yaml.safe_dump({k: v for k, v in fields.items() if v is not None}))
    return pkg


def run(pkg: Path, src: Path, settings=SETTINGS):
    return measure("verification", pkg, "tiny", source_checkpoint=str(src / "hf"), n_params=1_600_000,
                   vocab_size=49152, continuations=str(src / "cont.parquet"),
                   reference_scores=str(src / "ref.parquet"), settings=settings)


@pytest.fixture(scope="module")
def honest(tiny_source, tmp_path_factory):
    pkg = make_package(tmp_path_factory.mktemp("honest"), tiny_source, HONEST, name="honest")
    return pkg, run(pkg, tiny_source)


def test_honest_submission_verifies_with_f_equal_one(honest):
    pkg, record = honest
    assert record.failure is None, record.failure
    assert all(c.passed for c in record.checks), [c for c in record.checks if not c.passed]
    assert record.f == pytest.approx(1.0, abs=1e-4)  # float32 twin of the reference
    judged = verdict(record, Task(name="t", source="tiny", limit_gib=1.0))
    assert judged.failed_check is None and judged.score == record.f
    tight = verdict(record, Task(name="t", source="tiny", limit_gib=record.s_pkg_bytes / GIB * 0.9))
    assert tight.failed_check == "storage_package" and tight.score == 0.0
    assert record.decode.tps > 0 and record.s_res_bytes >= 4 * 1_500_000


def test_lazy_full_precision_copy_is_charged(tiny_source, tmp_path, honest):
    code = HONEST.replace("    def logits(self, input_ids, n_last):\n", """    def logits(self, input_ids, n_last):
        if not hasattr(self, "fp64_copy"):
            self.fp64_copy = [p.detach().double().clone() for p in self.model.parameters()]
""")
    record = run(make_package(tmp_path, tiny_source, code, name="lazy"), tiny_source)
    assert record.s_res_after_inference_bytes > 2 * record.s_res_load_bytes
    limit = max(honest[1].s_pkg_bytes, honest[1].s_res_bytes) * 1.2 / GIB
    assert verdict(honest[1], Task(name="t", source="tiny", limit_gib=limit)).failed_check is None
    assert verdict(record, Task(name="t", source="tiny", limit_gib=limit)).failed_check == "storage_resident"


def test_scaled_logits_are_scored_as_returned(tiny_source, tmp_path, honest):
    code = HONEST.replace("logits_to_keep=n_last).logits.float().numpy()",
                          "logits_to_keep=n_last).logits.float().numpy() * 8.0")
    record = run(make_package(tmp_path, tiny_source, code, name="scaled"), tiny_source)
    # log-softmax of the returned logits: a sharper distribution, a different (lower) F
    assert record.f < honest[1].f - 1e-3
    assert next(c for c in record.checks if c.name == "greedy_matches_argmax").passed


@pytest.mark.parametrize("name,code,cause", [
    ("import_error", "import not_a_module_xyz\n" + HONEST, "ModuleNotFoundError"),
    ("wrong_shape", HONEST.replace(".logits.float().numpy()", ".logits.float().numpy()[:, :1]"), "shape"),
    ("crash", HONEST.replace("    def release(self):\n        pass",
                             "    def release(self):\n        import os; os._exit(3)"), "crash"),
])
def test_broken_submissions_get_failure_records(tiny_source, tmp_path, name, code, cause):
    record = run(make_package(tmp_path, tiny_source, code, name=name), tiny_source)
    assert record.failed_check is None or record.failed_check == "execution"
    assert any(c.name == "execution" and not c.passed for c in record.checks)
    assert cause in record.failure


def test_hanging_submission_times_out(tiny_source, tmp_path):
    code = HONEST.replace("    def logits(self, input_ids, n_last):\n",
                          "    def logits(self, input_ids, n_last):\n        import time; time.sleep(600)\n")
    settings = SETTINGS.model_copy(update={"timeout_s": 25})
    record = run(make_package(tmp_path, tiny_source, code, name="hang"), tiny_source, settings)
    assert "timeout" in record.failure and record.wall_s < 60


def test_bad_manifest_names_the_field(tiny_source, tmp_path):
    pkg = make_package(tmp_path, tiny_source, HONEST, name="bad", runtime="tensorrt")
    record = run(pkg, tiny_source)
    assert record.checks[0].name == "package" and "field 'runtime'" in record.failure
    pkg2 = make_package(tmp_path, tiny_source, HONEST, name="noweights", weights="missing_dir")
    assert "field 'weights'" in run(pkg2, tiny_source).failure


def test_access_log_allows_reading_back_own_files_only(tmp_path):
    import os

    from infbench.compression.worker import AccessLog

    log = AccessLog([tmp_path / "package"])
    scratch = tmp_path / "scratch"
    log("os.mkdir", (str(scratch), 0o777, -1))
    log("open", (str(tmp_path / "written.bin"), "wb", os.O_WRONLY | os.O_CREAT))
    log("open", (str(scratch / "offloaded.dat"), "rb", os.O_RDONLY))
    log("open", (str(tmp_path / "written.bin"), "rb", os.O_RDONLY))
    log("open", (str(tmp_path / "package" / "weights.bin"), "rb", os.O_RDONLY))
    assert log.reads == []
    existing = tmp_path / "someone_elses.bin"
    existing.write_bytes(b"x")
    log("open", (str(existing), "wb", os.O_WRONLY | os.O_CREAT))  # overwriting does not make it ours
    log("open", (str(existing), "rb", os.O_RDONLY))
    log("open", (str(tmp_path / "other.bin"), "rb", os.O_RDONLY))
    assert log.reads == [os.path.realpath(existing), os.path.realpath(tmp_path / "other.bin")]
