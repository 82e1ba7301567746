"""An accuracy gate only the model can pass (issue 36), through final verification for real: the gate's questions
are not in the package's sandbox, GSM8K-style problems are drawn by the secret, and a package whose logits follow
an answer key on the gate's prompts fails ``gate_consistency`` (its likelihood of the source's own answers there
disagrees with its likelihood on the verification set); honest packages, the same weights or weaker ones, pass."""

import json

import pytest
from compression_helpers import HONEST, answers_settings, gate_job, make_package, run, source_reference
from conftest import needs_sandbox

from infbench.compression.records import verdict
from infbench.compression.tasks import Task
from infbench.evaluation.results import read_json

pytestmark = [pytest.mark.slow, needs_sandbox()]

STEP_RETURN = "        return self.last_logits([self.rows[row] for row in rows])\n"
LAST_LOGITS = "    @torch.inference_mode()\n    def last_logits(self, rows):\n"


def checks_of(record) -> dict:
    return {c.name: c for c in record.checks}


@pytest.fixture(scope="module")
def reference(tiny_source, tmp_path_factory):
    """The tiny source's A(p) on two questions per benchmark, 6 new tokens each, with its greedy answers."""
    settings = answers_settings(2, gsm8k=6, humaneval=6, triviaqa=6)
    path = source_reference(settings, tmp_path_factory.mktemp("reference"), tiny_source)
    return settings, path


# A weaker model: the source plus a fixed bias over the vocabulary (F about 0.6 on the tiny source's set).
WEAKER = HONEST.replace(
    LAST_LOGITS,
    """    BIAS = None

    def last_logits(self, rows):
        if self.BIAS is None:
            noise = torch.randn(self.model.config.vocab_size, generator=torch.Generator().manual_seed(0))
            self.BIAS = noise.numpy().astype(np.float32)
        return self.raw_logits(rows) + self.BIAS

    @torch.inference_mode()
    def raw_logits(self, rows):
""",
)

# The weaker model answering the gate from a key: the source's own greedy answers, looked up by the prompt
# (the key the package carries: KEY maps a prompt's tokens to the source's answer), its logits bent toward the
# key's next token there and nowhere else.
SOURCE_KEY = WEAKER.replace(
    "        return self.last_logits([self.rows[row] for row in rows])\n",
    """        out = self.last_logits([self.rows[row] for row in rows])
        for k, row in enumerate(rows):
            self.bend(out, k, row)
        return out

    def bend(self, out, k, row):
        for prompt, answer in KEY:
            n = len(self.rows[row]) - len(prompt)
            if 0 <= n < len(answer) and self.rows[row][: len(prompt)] == prompt:
                out[k, answer[n]] += BEND
""",
).replace(
    "    def prefill(self, rows, max_new_tokens):\n        self.rows = [list(r) for r in rows]\n"
    "        return self.last_logits(self.rows)\n",
    """    def prefill(self, rows, max_new_tokens):
        self.rows = [list(r) for r in rows]
        out = self.last_logits(self.rows)
        for k in range(len(rows)):
            self.bend(out, k, k)
        return out
""",
)


def key_of(reference_path, tiny_source) -> list:
    """(prompt tokens, the source's answer tokens) of every gate item, as a package would carry them."""
    from infbench.compression.accuracy import source_answers

    settings, path = reference_path
    _, prompts, tokens, _ = source_answers(gate_job(settings, path, tiny_source))
    return [[list(p), list(t)] for p, t in zip(prompts, tokens)]


@pytest.mark.parametrize(
    "name,code,passes",
    [
        ("honest", HONEST, True),
        ("weaker", WEAKER, True),
        ("source_key", SOURCE_KEY, False),
    ],
)
def test_answers_must_agree_with_the_likelihood(tiny_source, tmp_path, reference, name, code, passes):
    settings, path = reference
    if "KEY" in code:
        code = f"KEY = {json.dumps(key_of(reference, tiny_source))}\nBEND = 30.0\n" + code
    record = run(
        make_package(tmp_path, tiny_source, code, name=name), tiny_source, gate=gate_job(settings, path, tiny_source)
    )
    assert record.failure is None, record.failure
    check = checks_of(record)["gate_consistency"]
    assert check.passed is passes, check.evidence
    judged = verdict(record, Task(name="t", source="tiny", limit_gib=1.0))
    if passes:
        assert judged.failed_check is None, judged.checks
    else:
        # the key buys the source's own answers, the source's accuracy: the gate alone would let it through
        assert record.accuracy_mean == pytest.approx(read_json(path).mean_accuracy)
        assert check.evidence["gate_excess_nats_per_token"] < check.evidence["band"][0]
        assert judged.failed_check == "gate_consistency" and judged.score == 0.0


# Bent only on the gate's prompts, which it tells from the verification set's contexts by their length (the
# tiny set's contexts are 16 tokens; every gate prompt is longer).
KEY_ON_GOLD = HONEST.replace(
    STEP_RETURN,
    """        out = self.last_logits([self.rows[row] for row in rows])
        for k, row in enumerate(rows):
            if self.prompt_tokens[row] > 20:
                out[k, KEY] += 1000.0
        return out
""",
).replace(
    "        self.rows = [list(r) for r in rows]\n",
    "        self.rows = [list(r) for r in rows]\n        self.prompt_tokens = [len(r) for r in rows]\n",
)


def test_a_key_bent_into_the_logits_fails_gate_consistency(tiny_source, tmp_path, reference):
    """The source's logits with one answer token raised after the first (a key that contradicts the source's
    own answers): its loss on them is far above its loss on the verification set."""
    from transformers import AutoTokenizer

    settings, path = reference
    (key,) = AutoTokenizer.from_pretrained(tiny_source / "hf")(" key", add_special_tokens=False)["input_ids"]
    code = f"KEY = {key}\n" + KEY_ON_GOLD
    record = run(
        make_package(tmp_path, tiny_source, code, name="gold"), tiny_source, gate=gate_job(settings, path, tiny_source)
    )
    check = checks_of(record)["gate_consistency"]
    assert not check.passed and check.evidence["gate_excess_nats_per_token"] > check.evidence["band"][1]


READ_QUESTIONS = HONEST.replace(
    "        self.rows = []\n",
    """        self.rows = []
        import infbench, os, sys
        data = os.path.join(os.path.dirname(infbench.__file__), "evaluation", "data")
        seen = sorted(os.listdir(data)) if os.path.isdir(data) else None
        print("QUESTIONS", seen, file=sys.stderr, flush=True)
""",
    1,
)


def test_the_gate_questions_are_not_in_the_sandbox(tiny_source, tmp_path):
    log = tmp_path / "worker.log"
    record = run(make_package(tmp_path, tiny_source, READ_QUESTIONS, name="reader"), tiny_source, log=str(log))
    assert record.failure is None and record.sandbox.kind == "bwrap"
    line = next(line for line in log.read_text().splitlines() if "QUESTIONS" in line)
    assert line.endswith("QUESTIONS []") or line.endswith("QUESTIONS None"), line
    assert any("evaluation/data" in h for h in record.sandbox.hidden)
