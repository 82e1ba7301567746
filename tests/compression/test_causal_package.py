"""The package as a causal next-token function the pipeline drives (infbench.compression.package_api): the
attacks of issue 34 and variants, each run through final verification for real (sandboxed worker).

A look-ahead has nothing to read (a token is revealed only after its position is scored), a separate
"generate" is never called (every generated token is the argmax of the package's logits), and a package whose
answers depend on what it saw before fails ``statefulness`` in a second, fresh worker."""

import numpy as np
import pytest
from compression_helpers import HONEST, answers_settings, gate_job, make_package, reference_answers, run
from conftest import needs_sandbox

from infbench.compression.records import verdict
from infbench.compression.tasks import Task

pytestmark = [pytest.mark.slow, needs_sandbox()]

STEP_RETURN = "        return self.last_logits([self.rows[row] for row in rows])\n"


def judged(record):
    return verdict(record, Task(name="t", source="tiny", limit_gib=1.0))


def checks_of(record) -> dict:
    return {c.name: c for c in record.checks}


@pytest.fixture(scope="module")
def honest(tiny_source, tmp_path_factory):
    record = run(make_package(tmp_path_factory.mktemp("honest"), tiny_source, HONEST, name="honest"), tiny_source)
    assert record.failure is None and judged(record).failed_check is None, record.failure
    return record


# Every place a package could find the next token before scoring it: the request pipe (anything readable on
# fd 0 while it computes) and its process's other pipes. At a few positions a row (chosen from the
# prefix alone, as the sparse look-ahead) it raises whatever future token it found to p = 0.9.
SPARSE_LOOK_AHEAD = HONEST.replace(
    STEP_RETURN,
    """        out = self.last_logits([self.rows[row] for row in rows])
        for k, row in enumerate(rows):
            if hash(tuple(self.rows[row])) % 64 < 1:  # about 4 of 255 positions a row, from the prefix alone
                future = self.peek()
                if future is not None:
                    out[k] -= out[k].max()
                    out[k, future] = np.log(0.9 / 0.1 * np.exp(out[k]).sum())
        return out

    def peek(self):
        import os, select, sys
        found = []
        if select.select([0], [], [], 0)[0]:
            found.append("fd0")
        for fd in os.listdir("/proc/self/fd"):
            try:
                pipe = os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
                if int(fd) > 2 and pipe and select.select([int(fd)], [], [], 0)[0]:
                    found.append(f"pipe fd {fd}")
            except (OSError, ValueError):
                pass
        print("LOOKAHEAD", found, file=sys.stderr, flush=True)
        return None
""",
)


def test_a_sparse_look_ahead_has_nothing_to_read(tiny_source, tmp_path, honest):
    """The issue's sparse look-ahead, written against the causal interface: it looks for the next token at a
    few positions a row, finds nothing anywhere, and so scores exactly as the honest package."""
    log = tmp_path / "worker.log"
    record = run(make_package(tmp_path, tiny_source, SPARSE_LOOK_AHEAD, name="sparse"), tiny_source, log=str(log))
    text = log.read_text()
    assert "LOOKAHEAD" in text, text[-2000:]
    assert all(line.endswith("LOOKAHEAD []") for line in text.splitlines() if "LOOKAHEAD" in line), text[-2000:]
    assert record.f == pytest.approx(honest.f, abs=1e-6) and judged(record).failed_check is None


# The old look-ahead's bonus, on the only token a causal package can name: its own guess. Raising the argmax
# to p = 0.9 at every position is a different (sharper) model, scored as such: no gain on the source's samples.
RAISED_GUESS = HONEST.replace(
    STEP_RETURN,
    """        out = self.last_logits([self.rows[row] for row in rows])
        for k in range(len(rows)):
            guess = int(out[k].argmax())
            rest = np.exp(out[k] - out[k].max()).sum() - 1
            out[k, guess] = out[k].max() + np.log(0.9 / 0.1 * rest)
        return out
""",
)


def test_raising_its_own_guess_is_only_another_model(tiny_source, tmp_path, honest):
    record = run(make_package(tmp_path, tiny_source, RAISED_GUESS, name="guess"), tiny_source)
    assert record.failure is None and record.f < honest.f


# Adapting to what it was shown: a cache of every token revealed so far, over all rows (a unigram cache across
# contexts, as dynamic evaluation learns from the set it is scored on), with or without a memo that repeats
# its first answer whenever a prefix comes again.
ADAPTIVE = HONEST.replace(
    "        self.rows = []\n",
    "        self.rows = []\n        self.seen = np.zeros(49152, np.float32)\n        self.memo = {}\n",
    1,
).replace(
    STEP_RETURN,
    """        for token in tokens:
            self.seen[int(token)] += 1
        out = self.last_logits([self.rows[row] for row in rows]) + 20.0 * np.log1p(self.seen)
        if MEMO:
            for k, row in enumerate(rows):
                out[k] = self.memo.setdefault(tuple(self.rows[row]), out[k])
        return out
""",
)


@pytest.mark.parametrize("memo", [False, True], ids=["adapting", "adapting_with_memo"])
def test_a_package_adapting_to_what_it_saw_fails_statefulness(tiny_source, tmp_path, memo):
    code = f"MEMO = {memo}\n" + ADAPTIVE
    record = run(make_package(tmp_path, tiny_source, code, name=f"adaptive_{memo}"), tiny_source)
    checks = checks_of(record)
    assert record.failure is None, record.failure
    assert not checks["statefulness"].passed and checks["statefulness"].evidence["max_abs_logprob_diff"] > 0.05
    assert judged(record).failed_check == "statefulness" and judged(record).score == 0.0


# A "generate" that answers from a key while the logits are honest: the pipeline never calls it.
KEYED_GENERATE = HONEST.replace(
    "    def release(self):\n",
    """    def generate(self, input_ids, max_new_tokens):
        import sys
        print("GENERATE CALLED", file=sys.stderr, flush=True)
        yield from [28, 28]

    def release(self):
""",
)


def test_a_separate_generate_is_never_called(tiny_source, tmp_path):
    """Its gate answers are its logits' argmax, the honest package's answers to the same questions."""
    settings = answers_settings()
    gate = gate_job(settings, reference_answers(settings, tmp_path / "reference.json"), tiny_source)
    answers = {}
    for name, code in (("honest", HONEST), ("keyed", KEYED_GENERATE)):
        log = tmp_path / f"{name}.log"
        record = run(make_package(tmp_path, tiny_source, code, name=name), tiny_source, gate=gate, log=str(log))
        assert record.failure is None, record.failure
        assert "GENERATE CALLED" not in log.read_text()
        items = checks_of(record)["accuracy_gate"].evidence["items"]
        answers[name] = [i["response"] for i in items]
    assert answers["keyed"] == answers["honest"]


# Bending the logits toward a key at gate prompts makes the key the package's generation (the argmax): what
# the gate sees is what the logits say, by construction (issue 36 checks those logits against the likelihood).
KEY_IN_LOGITS = HONEST.replace(
    STEP_RETURN,
    """        out = self.last_logits([self.rows[row] for row in rows])
        out[:, KEY] += 1000.0
        return out
""",
)


def test_what_the_gate_generates_is_the_argmax_of_the_logits(tiny_source, tmp_path):
    from transformers import AutoTokenizer

    (key,) = AutoTokenizer.from_pretrained(tiny_source / "hf")(" key", add_special_tokens=False)["input_ids"]
    settings = answers_settings()
    gate = gate_job(settings, reference_answers(settings, tmp_path / "reference.json"), tiny_source)
    code = f"KEY = {key}\n" + KEY_IN_LOGITS
    record = run(make_package(tmp_path, tiny_source, code, name="key"), tiny_source, gate=gate)
    items = checks_of(record)["accuracy_gate"].evidence["items"]
    # after the first token (the prefill's, unbent) every generated token is the key
    assert sum(i["response"].endswith(" key key key") for i in items) >= 2, items


def test_logits_in_bfloat16_cross_in_bfloat16(tiny_source, tmp_path, honest):
    """A package whose model computes in BF16 hands its logits over as they are: the pipeline reads BF16 (half
    the bytes) and scores them."""
    code = HONEST.replace(
        ".logits[0, -1].float().numpy() for r in rows]\n        )",
        ".logits[0, -1].bfloat16() for r in rows]\n        )",
    ).replace("        return np.stack(\n", "        return torch.stack(\n")
    record = run(make_package(tmp_path, tiny_source, code, name="bf16"), tiny_source)
    assert record.failure is None, record.failure
    assert abs(record.f - honest.f) < 0.02 and np.isfinite(record.ppl)
