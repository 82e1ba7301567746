"""Logits over the worker's pipe (infbench.compression.logits_pipe): real sandboxed packages that take over
the channel and send something else than the frame asked for. Each is a named failure (logits_transport or
logits_shape) within the request's deadline; nothing hangs, nothing on the host is read, no IPC directory
exists."""

import textwrap
import time

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
IDS = np.arange(24, dtype=np.int64).reshape(2, 12)
N_LAST = 5

# A package without a model: logits are a function of the ids. ATTACK runs inside logits() with the worker
# (found through gc, as a package that read the worker's code would), the logits pipe's descriptor (from the
# worker's command line) and the request's number (the package counts them).
PACKAGE = """
import gc, io, json, os, struct, sys, time
import numpy as np

FD = int(sys.argv[sys.argv.index("--logits-fd") + 1])
HEADER = struct.Struct("<8sQ4sQQQ")


def worker():
    return next(o for o in gc.get_objects() if type(o).__name__ == "Worker")


def honest(ids, n_last):
    ids = np.asarray(ids)
    return (ids[:, -n_last:, None] * 0.01 + np.arange({vocab}) * 0.001).astype(np.float32)


class Model:
    calls = 0

    def logits(self, input_ids, n_last):
        Model.calls += 1
        out = honest(input_ids, n_last)
        request, shape = Model.calls, list(out.shape)
        def header(dtype=b"<f4\\0", dims=shape, number=request):
            return HEADER.pack(b"IBLOGIT1", number, dtype, *dims)
        def reply():
            worker().protocol.write(json.dumps({{"ok": True, "shape": shape}}) + "\\n")
{attack}
        return out

    def generate(self, input_ids, max_new_tokens):
        yield 0

    def release(self):
        pass


def load(package_dir, device):
    return Model()
"""

# What the package does, and the problem the pipeline must name (None: the values arrive as sent).
ATTACKS = {
    "npz": ("buf = io.BytesIO(); np.savez(buf, logits=out); os.write(FD, buf.getvalue())", "marker"),
    "oversize": ("os.write(FD, header(dims=[shape[0], shape[1], 1 << 40]))", "shape"),
    "big_endian": ("os.write(FD, header(dtype=b'>f4\\0') + out.astype('>f4').tobytes())", "dtype"),
    "wrong_dtype": ("os.write(FD, header(dtype=b'<f8\\0') + out.astype('<f8').tobytes())", "dtype"),
    "stale_request": ("os.write(FD, header(number=request + 7) + out.tobytes())", "request"),
    "trailing_bytes": ("os.write(FD, header() + out.tobytes() + b'extra')", "trailing"),
    "short_write_then_exit": ("reply(); os.write(FD, header() + out.tobytes()[:100]); os._exit(0)", "closed"),
    "never_finishes_writing": ("reply(); os.write(FD, header() + out.tobytes()[:100]); time.sleep(3600)", "timeout"),
    # one worker, a request each: what a file-based transport would have opened (a symlink to a host file and
    # a FIFO where logits files were), logits the runtime returns big-endian or as float64 (converted: the
    # same values arrive), a shape that is not the one asked for (logits_shape; no frame is sent, the pipe
    # stays in step), then honest logits again
    "honest_conversions": (
        """
if request == 1:
    for d in ('/tmp', '/dev/shm', '/dev'):
        for make in (lambda p: os.symlink('/etc/passwd', p), os.mkfifo):
            try: make(f'{d}/logits-{request}-{make.__name__}.npy')
            except OSError: pass
elif request == 2:
    out = out.astype('>f4')
elif request == 3:
    out = out.astype(np.float64)
elif request == 4:
    out = out[:, :, :-1]
""",
        None,
    ),
}


def package(root, attack: str):
    pkg = root / attack
    (pkg / "w").mkdir(parents=True)
    (pkg / "tok").mkdir()
    body = textwrap.indent(textwrap.dedent(ATTACKS[attack][0]), " " * 8)
    (pkg / "inference.py").write_text(PACKAGE.format(vocab=VOCAB, attack=body))
    (pkg / "manifest.yaml").write_text(
        yaml.safe_dump(
            {
                "name": attack,
                "source": "tiny",
                "runtime": "python",
                "weights": "w",
                "tokenizer": "tok",
                "entrypoint": "inference.py:load",
            }
        )
    )
    return pkg


def expected_logits() -> np.ndarray:
    return (IDS[:, -N_LAST:, None] * 0.01 + np.arange(VOCAB) * 0.001).astype(np.float32)


@pytest.mark.parametrize("attack", sorted(set(ATTACKS) - {"honest_conversions"}))
def test_what_is_not_the_frame_asked_for_is_a_named_failure_within_the_deadline(tmp_path, attack):
    budget = 20.0
    start = time.monotonic()
    with SubmissionProcess(
        package(tmp_path, attack), sandbox=SETTINGS.sandbox, preload=[], timeout_s=budget, vocab_size=VOCAB
    ) as proc:
        proc.load()
        with pytest.raises(CheckFailed) as failed:
            proc.logits(IDS, N_LAST)
        elapsed = time.monotonic() - start
    assert failed.value.check == "logits_transport"
    assert failed.value.evidence["problem"] == ATTACKS[attack][1], failed.value.evidence
    assert failed.value.evidence["expected_shape"] == [2, N_LAST, VOCAB]
    assert elapsed < budget + 3  # within the request's deadline, never a hang


def test_only_the_pipe_is_read_and_converted_values_arrive_as_returned(tmp_path):
    with SubmissionProcess(
        package(tmp_path, "honest_conversions"), sandbox=SETTINGS.sandbox, preload=[], timeout_s=60, vocab_size=VOCAB
    ) as proc:
        proc.load()
        for _ in range(3):  # a symlink and a FIFO planted; big-endian values; float64 values
            np.testing.assert_array_equal(proc.logits(IDS, N_LAST), expected_logits())
        with pytest.raises(CheckFailed) as failed:
            proc.logits(IDS, N_LAST)
        assert failed.value.check == "logits_shape"
        assert failed.value.evidence == {
            "logits_shape": [2, N_LAST, VOCAB - 1],
            "expected": [2, N_LAST, VOCAB],
            "source_vocab": VOCAB,
        }
        np.testing.assert_array_equal(proc.logits(IDS, N_LAST), expected_logits())


@pytest.mark.slow
def test_a_transport_attack_is_a_named_failure_record(tiny_source, tmp_path):
    """Through final verification: the record fails ``logits_transport`` with its evidence."""
    from compression_helpers import HONEST

    zip_first = (
        "        import os, sys\n"
        "        fd = int(sys.argv[sys.argv.index('--logits-fd') + 1])\n"
        "        os.write(fd, b'PK\\x03\\x04' + bytes(60))\n"
    )
    code = HONEST.replace(
        "    def logits(self, input_ids, n_last):\n", "    def logits(self, input_ids, n_last):\n" + zip_first
    )
    record = run(make_package(tmp_path, tiny_source, code, name="npz_logits"), tiny_source)
    judged = verdict(record, Task(name="t", source="tiny", limit_gib=1.0))
    assert judged.failed_check == "logits_transport" and judged.score == 0.0
    assert record.checks[-1].evidence["problem"] == "marker"
