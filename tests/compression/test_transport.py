"""Logits through the shared buffer (infbench.compression.harness.transport): real sandboxed packages that take
over the worker's writer and leave something else than the frame asked for, or try to keep data in the buffer.
Each is a named failure (logits_transport or logits_shape); nothing parked in the buffer survives a memory
measurement; the buffer's size cannot change."""

import textwrap

import numpy as np
import pytest
import yaml
from compression_helpers import SETTINGS, make_package, run
from conftest import needs_sandbox

from infbench.checks import CheckFailed
from infbench.compression.client import SubmissionProcess
from infbench.compression.records import verdict
from infbench.compression.tasks import Task

pytestmark = needs_sandbox()

VOCAB = 64
ROWS = [np.arange(12, dtype=np.int64), np.arange(5, dtype=np.int64)]

# A package without a model: logits are a function of the rows. ATTACK runs in place of the worker's frame
# writer (found through gc, as a package that read the worker's code would), after the package has answered.
PACKAGE = """
import gc, os, struct, sys
import numpy as np

FD = int(sys.argv[sys.argv.index("--logits-fd") + 1])
STASH = b"parked between requests" * 20


def honest(rows):
    lengths = np.asarray([len(r) for r in rows], np.float32)[:, None]
    return (lengths * 0.01 + np.arange({vocab}) * 0.001).astype(np.float32)


class Model:
    calls = 0

    def prefill(self, rows, max_new_tokens):
        Model.calls += 1
        frames = next(o for o in gc.get_objects() if type(o).__name__ == "Worker").frames
        writer = type(frames).write
        request_number = Model.calls
        out = honest(rows)

        def write(request, logits):
{attack}

        frames.write = write
        return out

    def step(self, tokens, rows):
        return honest(rows)

    def release(self):
        pass


def load(package_dir, device):
    return Model()
"""

# What the package does instead of the worker's write, and the problem the pipeline must name.
ATTACKS = {
    "zip_marker": ("writer(frames, request, logits); frames.map[0:8] = b'PK\\x03\\x04' + bytes(4)", "marker"),
    "stale_request": ("writer(frames, request + 7, logits)", "request"),
    "wrong_dtype": ("writer(frames, request, logits); frames.map[16:20] = b'<f8\\0'", "dtype"),
    "oversize": ("writer(frames, request, logits); struct.pack_into('<Q', frames.map, 20, 1 << 40)", "shape"),
    "nothing_written": ("pass", "marker"),
}


def package(root, attack: str):
    pkg = root / f"attack{len(list(root.iterdir()))}"
    (pkg / "w").mkdir(parents=True)
    (pkg / "tok").mkdir()
    body = textwrap.indent(textwrap.dedent(attack), " " * 12)
    (pkg / "inference.py").write_text(PACKAGE.format(vocab=VOCAB, attack=body))
    manifest = {"name": "t", "source": "tiny", "runtime": "python", "weights": "w", "tokenizer": "tok"}
    (pkg / "manifest.yaml").write_text(yaml.safe_dump({**manifest, "entrypoint": "inference.py:load"}))
    return pkg


def expected(rows) -> np.ndarray:
    return (np.asarray([len(r) for r in rows], np.float32)[:, None] * 0.01 + np.arange(VOCAB) * 0.001).astype(
        np.float32
    )


def process(pkg):
    return SubmissionProcess(
        pkg, sandbox=SETTINGS.sandbox, preload=[], timeout_s=60, vocab_size=VOCAB, max_logits=4 * VOCAB * 16
    )


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_what_is_not_the_frame_asked_for_is_a_named_failure(tmp_path, attack):
    with process(package(tmp_path, ATTACKS[attack][0])) as proc:
        proc.load()
        with pytest.raises(CheckFailed) as failed:
            proc.prefill(ROWS, 4)
    assert failed.value.check == "logits_transport"
    assert failed.value.evidence["problem"] == ATTACKS[attack][1], failed.value.evidence
    assert failed.value.evidence["expected_shape"] == [2, VOCAB]


RESIZE_AND_PARK = """
result = []
for size in (0, 1 << 34):  # shrink it under the pipeline's mapping, or grow it into storage
    try:
        os.ftruncate(FD, size)
        result.append("resized")
    except OSError as exc:
        result.append(exc.errno)
end = len(frames.map)
if request_number > 1:  # what was parked after the first answer, still there?
    result.append(bytes(frames.map[end - len(STASH):end]) == STASH)
writer(frames, request, np.asarray(result + [0.0] * ({vocab} - len(result)), np.float32)[None].repeat(len(out), 0))
frames.map[end - len(STASH):end] = STASH
"""


def test_the_buffer_cannot_be_resized_and_nothing_parked_in_it_survives_a_measurement(tmp_path):
    with process(package(tmp_path, RESIZE_AND_PARK.format(vocab=VOCAB))) as proc:
        proc.load()
        first = proc.prefill(ROWS, 4).numpy()
        assert list(first[0, :2]) == [1.0, 1.0]  # EPERM twice: the size is sealed
        kept = proc.prefill(ROWS, 4).numpy()[0, 2]
        proc.memory()  # wipes the buffer before measuring
        after_measurement = proc.prefill(ROWS, 4).numpy()[0, 2]
    assert kept == 1.0 and after_measurement == 0.0


def test_arrays_of_other_dtypes_arrive_as_float32_values(tmp_path):
    conversions = "writer(frames, request, logits.astype('>f4') if request_number % 2 else logits.astype(np.float64))"
    with process(package(tmp_path, conversions)) as proc:
        proc.load()
        for _ in range(2):
            got = proc.prefill(ROWS, 4)
            assert str(got.dtype) == "torch.float32"
            np.testing.assert_array_equal(got.numpy(), expected(ROWS))


@pytest.mark.slow
def test_a_transport_attack_is_a_named_failure_record(tiny_source, tmp_path):
    """Through final verification: the record fails ``logits_transport`` with its evidence."""
    from compression_helpers import HONEST

    corrupt = (
        "        import gc\n"
        "        frames = next(o for o in gc.get_objects() if type(o).__name__ == 'Worker').frames\n"
        "        zip_marker = b'PK\\x03\\x04' + bytes(4)\n"
        "        frames.write = lambda request, logits: frames.map.__setitem__(slice(0, 8), zip_marker)\n"
    )
    code = HONEST.replace(
        "    def prefill(self, rows, max_new_tokens):\n", "    def prefill(self, rows, max_new_tokens):\n" + corrupt
    )
    record = run(make_package(tmp_path, tiny_source, code, name="zip_logits"), tiny_source)
    judged = verdict(record, Task(name="t", source="tiny", limit_gib=1.0))
    assert judged.failed_check == "logits_transport" and judged.score == 0.0
    assert record.checks[-1].evidence["problem"] == "marker"
