"""ServerBench verification (PROTOCOL B5): server submissions rebuilt in a fresh copy, replayed on
held-out seeds and checked; cheating servers rejected by the check that targets them.

Real server processes on loopback; tiny random Llamas with the SmolLM2 tokenizer (peaked logits, an
EOS that greedy decoding reaches) stand in for the checkpoint, except in the S0 + llama.cpp test,
which serves the real SmolLM2-135M and its F16 GGUF twin.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import pytest
import verify_helpers as vh
import yaml
from conftest import REPO, planned_jobs, run_snakemake

CONTEXT = 512
SANDBOX = {"allow_unsandboxed": False, "tmp_mb": 512}


def _run(env, directory, serving=None, model_dir=None, gguf="", ref=None, secret=None):
    # a directory of its own per call: a later run of the same submission keeps this one's record
    out = Path(tempfile.mkdtemp(prefix="run-", dir=env["root"])) / Path(directory).name
    return vh.run_job(
        directory,
        serving or env["serving"],
        env["answers"],
        model_dir or env["tiny"],
        gguf,
        ref or env["ref"],
        env["sessions"],
        out,
        SANDBOX,
        secret or vh.secret(),
    )


def _checks(record):
    return {c.name: c for c in record.checks}


@pytest.fixture(scope="module")
def env(tmp_path_factory, smollm2_source):
    from infbench.config.model import VerifySettings
    from infbench.serving.verify import reference

    root = tmp_path_factory.mktemp("verify")
    hf = smollm2_source[0] / "hf"
    tiny = vh.tiny_model(root / "tiny", hf, seed=0)
    other = vh.tiny_model(root / "other", hf, seed=1)
    context_sensitive = vh.tiny_model(root / "tiny-ctx", hf, seed=2, attention_scale=30.0)
    serving = vh.serving_config(CONTEXT)
    answers = vh.answer_settings()
    ref = root / "reference.json"
    record = reference.compute(
        "smollm2-135m",
        str(tiny),
        answers,
        VerifySettings.model_validate(serving["verification"]),
        (1000, 30000),
        str(ref),
        vh.secret(),
    )
    assert len(record.eos_probes) == 2 and all(len(p.expected) == 5 for p in record.eos_probes)
    return {
        "root": root,
        "tiny": tiny,
        "other": other,
        "context_sensitive": context_sensitive,
        "serving": serving,
        "answers": answers,
        "ref": ref,
        "sessions": vh.small_sessions(root, CONTEXT),
        "hf": hf,
    }


# (mode, the check that targets it, checks that must still pass: the rejection is specific)
ADVERSARIES = [
    ("truncate", ["complete_prompts", "context_probes"], ["exact_output_lengths", "streaming_consistency"]),
    ("stop_early", ["exact_output_lengths"], ["complete_prompts", "streaming_consistency"]),
    ("pad", ["fidelity"], ["complete_prompts", "exact_output_lengths", "streaming_consistency", "session_progress"]),
    ("random", ["fidelity"], ["complete_prompts", "exact_output_lengths", "streaming_consistency"]),
    ("other", ["fidelity"], ["complete_prompts", "exact_output_lengths", "streaming_consistency"]),
    ("crash_prefix", ["session_progress", "server_alive"], []),
    ("no_eos", ["natural_stopping"], ["complete_prompts", "exact_output_lengths", "fidelity"]),
    # a whitespace chunk without ids when the stream opens: not a token (TTFT stays honest), and rejected
    (
        "fake_first",
        ["streaming_consistency"],
        ["complete_prompts", "exact_output_lengths", "session_progress", "fidelity"],
    ),
    # one text chunk, no ids, usage claiming every token: the counts cannot be checked, so they are not taken
    ("usage_lies", ["streaming_consistency", "fidelity"], ["complete_prompts", "exact_output_lengths"]),
    # answers only the probes the public config used to determine honestly: the secret's probes are not those
    (
        "probe_aware",
        ["context_probes", "natural_stopping"],
        ["complete_prompts", "exact_output_lengths", "streaming_consistency"],
    ),
    # honest everywhere but on the held-out questions: EOS at once, or another model's greedy answers (this
    # random tiny reference answers none right, so only the agreement with its answers can tell)
    (
        "eos_answers",
        ["held_out_answers"],
        ["complete_prompts", "exact_output_lengths", "natural_stopping", "fidelity", "far_context"],
    ),
    (
        "weak_answers",
        ["held_out_answers"],
        ["complete_prompts", "exact_output_lengths", "natural_stopping", "fidelity", "far_context"],
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("mode, failing, passing", ADVERSARIES, ids=[a[0] for a in ADVERSARIES])
def test_adversarial_server_rejected_by_its_check(env, mode, failing, passing):
    extra = ["--other-model", "other_model"] if mode in ("other", "weak_answers") else []
    directory = vh.adversary(env["root"] / "subs", mode, extra)
    if extra:  # the smaller model it serves instead ships in the submission (nothing else is visible)
        shutil.copytree(env["other"], directory / "other_model")
    record = _run(env, directory)
    checks = _checks(record)
    assert not record.verified and record.failed_check in checks
    for name in failing:
        assert not checks[name].passed, (name, checks[name].summary)
    for name in passing:
        assert checks[name].passed, (name, checks[name].summary)
    assert Path(record.replays[0].records).is_file()


@pytest.mark.slow
def test_a_server_flooding_the_client_fails_session_progress_in_time(env):
    """After 5 honest requests, replay requests get an SSE line that never ends, a 16 MiB chunk or token chunks
    past max_tokens forever, in turn: each is a failed request naming why, cut at once (not at the request
    timeout), and session_progress fails; probes are answered honestly and pass."""
    import pandas as pd

    record = _run(env, vh.adversary(env["root"] / "subs", "flood", ["--honest-requests", "5"]))
    checks = _checks(record)
    assert record.failed_check == "session_progress", record.failure
    assert checks["context_probes"].passed and checks["natural_stopping"].passed
    frame = pd.read_parquet(record.replays[0].records)
    failed = frame[~frame["ok"]]
    for why in ("ResponseTooLarge: response larger than", "more token ids streamed than max_tokens"):
        assert failed["error"].str.contains(why, regex=False).sum() >= 2, (why, set(failed["error"]))
    assert (failed["end_time"] - failed["send_time"]).max() < 5.0 < env["serving"]["replay"]["request_timeout_s"]


@pytest.mark.slow
def test_honest_then_cheap_server_caught_by_suspects_sampled_over_time(env):
    """Honest for its first 300 requests or 20 s, then random tokens: suspects drawn from every part of the
    window (with the secret) score the late ones; the first 256 records alone would have looked honest."""
    serving = vh.serving_config(CONTEXT, fidelity_max_suspects=1)
    serving["replay"]["window_s"] = 30.0
    record = _run(env, vh.adversary(env["root"] / "subs", "cheap_later"), serving=serving)
    checks = _checks(record)
    assert checks["streaming_consistency"].passed and checks["exact_output_lengths"].passed
    suspects = checks["fidelity"].evidence["suspects"]
    sampled = [x for x in suspects if x["why"].startswith("sampled over time")]
    assert len(sampled) == 4 and any("stratum 4 of 4" in x["why"] for x in sampled)
    assert not checks["fidelity"].passed and not record.verified
    assert any(x["max_regret"] > 4.0 for x in sampled), suspects
    assert checks["fidelity"].evidence["drawn_with"] == "public demo"


@pytest.mark.slow
def test_a_table_precomputed_from_the_public_workload_fails_under_a_real_secret(env, tmp_path):
    """Greedy continuations computed offline for every prompt the public code and config determine (the final
    seed's prompts under the public demo secret), served without a model call: verified while the held-out
    prompts are those public ones; once they are drawn from an operator's secret not one prompt is in the
    table, and answering by length alone is rejected by fidelity."""
    from infbench.config.model import VerifySettings
    from infbench.serving.verify import reference

    directory = vh.adversary(env["root"] / "subs", "table", ["--table", "table.json"])
    table = vh.public_table(env["tiny"], env["sessions"], env["serving"])
    (directory / "table.json").write_text(json.dumps(table))
    public = _run(env, directory)
    served = Path(public.server_log).read_text()
    assert public.verified, [(c.name, c.summary) for c in public.checks if not c.passed]
    assert served.count("table exact") >= 10 and "table by_length" not in served

    operator = vh.secret("operator round 9", tmp_path)
    ref = tmp_path / "reference.json"
    reference.compute(
        "smollm2-135m",
        str(env["tiny"]),
        env["answers"],
        VerifySettings.model_validate(env["serving"]["verification"]),
        (1000, 30000),
        str(ref),
        operator,
    )
    held_out = _run(
        env, shutil.copytree(directory, directory.with_name("adv_table_held_out")), ref=ref, secret=operator
    )
    served = Path(held_out.server_log).read_text()
    checks = _checks(held_out)
    assert "table exact" not in served and served.count("table by_length") >= 10
    assert not held_out.verified and not checks["fidelity"].passed, checks["fidelity"].summary
    assert checks["complete_prompts"].passed and checks["streaming_consistency"].passed


@pytest.mark.slow
def test_no_check_passes_by_default(env, tmp_path):
    """Without the source tokenizer the text cannot be compared, and without EOS probes natural stopping cannot
    be tested: those checks fail naming why (the model-free instant server, a model directory without a
    tokenizer, a reference whose EOS search found nothing)."""
    serving = vh.serving_config(CONTEXT)
    serving["replay"]["window_s"] = 2.0
    ref = json.loads(Path(env["ref"]).read_text())
    ref["eos_probes"] = []
    (tmp_path / "reference.json").write_text(json.dumps(ref))
    spec = {
        "command": ["{python}", "-m", "infbench.serving.instant", "--port", "{port}"],
        "model": "smollm2-135m",
        "concurrency": 1,
    }
    record = _run(
        env,
        vh.submission_dir(tmp_path / "subs", "instant_ok", spec),
        serving=serving,
        model_dir=tmp_path / "no-tokenizer",
        ref=tmp_path / "reference.json",
    )
    checks = _checks(record)
    for name in ("streaming_consistency", "held_out_answers"):
        assert not checks[name].passed and "could not be loaded" in checks[name].summary, checks[name].summary
    assert not checks["natural_stopping"].passed and "reached EOS from none" in checks["natural_stopping"].summary
    assert checks["exact_output_lengths"].passed and not record.verified


@pytest.mark.slow
def test_quiet_truncation_caught_by_fidelity(env):
    """Truncating long prompts but reporting their full length: the accounting checks pass, the
    continuations (context probes, long replay prompts) do not match the reference's."""
    record = _run(env, vh.adversary(env["root"] / "subs", "truncate_quiet"), model_dir=env["context_sensitive"])
    checks = _checks(record)
    assert checks["complete_prompts"].passed and checks["context_probes"].passed
    assert not checks["fidelity"].passed and not record.verified, checks["fidelity"].summary


@pytest.mark.slow
def test_s0_on_a_tiny_model_passes_every_check(env):
    record = _run(env, vh.example(env["root"] / "subs", "S0", startup_timeout_s=120))
    assert record.verified, [(c.name, c.summary, c.evidence.get("traceback")) for c in record.checks if not c.passed]
    names = [c.name for c in record.checks]
    assert names == [
        "submission_files",
        "submission_spec",
        "requirements",
        "launch",
        "complete_prompts",
        "exact_output_lengths",
        "streaming_consistency",
        "session_progress",
        "context_probes",
        "natural_stopping",
        "held_out_answers",
        "server_alive",
        "fidelity",
        "far_context",
    ]
    assert _checks(record)["far_context"].evidence["with_clear_positions"] > 0
    assert _checks(record)["session_progress"].evidence["completed"] > 0
    assert record.replays[0].score.completed > 0 and record.provenance.params["submission"] == "S0"
    # the secret travels as a fingerprint, in the record too: its value is the operator's, after the round
    assert record.drawn_with == "public demo" and record.operator_secret == vh.secret().public()
    written = Path(record.server_log.removesuffix(".server.log") + ".json").read_text()
    assert vh.secret().value not in written and record.operator_secret["fingerprint"] in written
    assert record.provenance.params["operator_secret"] == vh.secret().public()


@pytest.mark.slow
def test_s0_and_llamacpp_pass_on_the_real_model(env, tmp_path, smollm2_f16_twin):
    """The real SmolLM2-135M (transformers) and its F16 GGUF twin (llama.cpp) as submissions."""
    from infbench.serving.verify import reference

    gguf = smollm2_f16_twin
    serving = vh.serving_config(CONTEXT, answers_n=2, eos_probes=1, fidelity_max_suspects=2)
    # every answered request counts, and the window leaves a slow machine time to answer carriers (under
    # load S0 on the real model once answered one request, inside the warm-up, in a 4 s window)
    serving["replay"].update({"warmup_s": 0.0, "window_s": 10.0})
    ref = tmp_path / "reference.json"
    from infbench.config.model import VerifySettings

    rec = reference.compute(
        "smollm2-135m",
        str(env["hf"]),
        env["answers"],
        VerifySettings.model_validate(serving["verification"]),
        (1000, 30000),
        str(ref),
        vh.secret(),
    )
    assert rec.eos_probes, "the real model reaches EOS on a chat prompt"
    for name in ("S0", "llamacpp"):
        record = _run(
            env,
            vh.example(tmp_path / "subs", name, startup_timeout_s=300),
            serving=serving,
            model_dir=env["hf"],
            gguf=str(gguf),
            ref=ref,
        )
        assert record.verified, (name, [(c.name, c.summary) for c in record.checks if not c.passed])
        far = _checks(record)["far_context"].evidence  # the real model's clear top-1s streamed
        assert far["clear_positions"] > 0, far


@pytest.mark.slow
@pytest.mark.parametrize("mode, failing", [("die", "server_alive"), ("hang", "session_progress")])
def test_server_that_dies_or_hangs_during_the_checks(env, mode, failing):
    serving = vh.serving_config(CONTEXT, probe_timeout_s=3)
    serving["replay"]["request_timeout_s"] = 3
    serving["replay"]["window_s"] = 8.0  # the hung request times out while the replay still sends
    spec = {
        "command": ["{python}", "-m", "infbench.serving.instant", "--port", "{port}", "--mode", mode, "--after", "3"],
        "model": "smollm2-135m",
        "concurrency": 1,
    }
    t = time.monotonic()
    record = _run(env, vh.submission_dir(env["root"] / "subs", f"instant_{mode}", spec), serving=serving)
    checks = _checks(record)
    assert not record.verified and not checks[failing].passed, checks[failing].summary
    assert time.monotonic() - t < 60
    if mode == "die":
        assert "exited with 1" in checks["server_alive"].summary


# Bad input: a record naming the cause, no process left behind.


def _fake_env(tmp_path):
    return {
        "root": tmp_path,
        "serving": vh.serving_config(CONTEXT),
        "answers": vh.answer_settings(),
        "tiny": tmp_path / "no-model",
        "ref": tmp_path / "no-ref.json",
        "sessions": tmp_path / "no-sessions",
    }


SLEEPER = ["{python}", "-c", "import time; time.sleep(600)", "infbench-test-sleeper-{port}"]


@pytest.mark.parametrize(
    "spec, check, cause",
    [
        (
            {"command": ["x"], "model": "smollm2-135m"},
            "submission_spec",
            "submission.yaml: field 'concurrency': Field required",
        ),
        (
            {"command": ["x", "{nope}"], "model": "smollm2-135m", "concurrency": 1},
            "submission_spec",
            "field 'command': bad placeholder 'nope'",
        ),
        ({"command": ["x"], "model": "gpt", "concurrency": 1}, "submission_spec", "field 'model': serves 'gpt'"),
        (
            {"command": ["x"], "model": "smollm2-135m", "concurrency": 1, "requires": ["no_such_module_xyz"]},
            "requirements",
            "not importable: no_such_module_xyz",
        ),
        (
            {"command": ["/nonexistent/server", "{port}"], "model": "smollm2-135m", "concurrency": 1},
            "launch",
            "launch command failed: [Errno 2] No such file or directory: '/nonexistent/server'",
        ),
        (
            {"command": ["{python}", "-c", "import sys; sys.exit(7)"], "model": "smollm2-135m", "concurrency": 1},
            "launch",
            "exited with 7 before it was healthy",
        ),
    ],
)
def test_bad_submission_gives_a_record_naming_the_cause(tmp_path, spec, check, cause):
    record = _run(_fake_env(tmp_path), vh.submission_dir(tmp_path / "subs", "bad", spec))
    assert not record.verified and record.failed_check == check and cause in record.failure
    [written] = tmp_path.glob("run-*/bad.json")  # the record the job wrote says the same
    assert yaml.safe_load(written.read_text())["failed_check"] == check


def _linking(tmp_path, how: str) -> tuple[Path, str]:
    """The S0 example with one name that reaches out of it (``how``), and what the record must say of it."""
    sub = vh.example(tmp_path / "subs", "S0")
    outside = tmp_path / "results" / "serving"
    outside.mkdir(parents=True)
    (outside / "reference.json").write_text('{"eos_probes": ["the expected continuations"]}')
    (outside / "verification").mkdir()
    (outside / "verification" / "earlier.json").write_text('{"operator_secret": {"value": "s3cret"}}')
    name = sub / "data.json"
    if how == "linked directory":  # the submission itself: a link to a directory the submitter does not own
        (tmp_path / "subs" / "linked").symlink_to(outside)
        (outside / "submission.yaml").write_text("command: [x]\nmodel: smollm2-135m\nconcurrency: 1\n")
        return tmp_path / "subs" / "linked", f"linked: the directory itself is a symlink to {outside}"
    if how == "fifo":
        os.mkfifo(name)
        return sub, "data.json: not a regular file, directory or symlink"
    if how == "hard link":
        os.link(outside / "reference.json", name)
        return sub, "data.json: hard link with 2 names, 1 of them in the package"
    target = {
        "reference": outside / "reference.json",
        "record": outside / "verification" / "earlier.json",
        "environ": "/proc/self/environ",
        "zero": "/dev/zero",
        "directory": outside,
    }[how]
    name.symlink_to(target)
    return sub, f"data.json: symlink to {target} points outside the package"


@pytest.mark.parametrize(
    "how", ["reference", "record", "environ", "zero", "directory", "hard link", "fifo", "linked directory"]
)
def test_a_name_reaching_out_of_the_submission_is_refused_before_any_file_is_read(tmp_path, how):
    """Links to the verification reference, an earlier record, the job's own environment or /dev/zero (which
    a host-side copy would read forever), a linked directory, a hard link, a FIFO: the record names the file,
    within seconds, before the spec is read."""
    from infbench.serving.verify import verdict  # noqa: F401  (imported before the clock starts)

    sub, cause = _linking(tmp_path, how)
    t = time.monotonic()
    record = _run(_fake_env(tmp_path), sub)
    assert record.failed_check == "submission_files" and cause in record.failure, record.failure
    assert [c.name for c in record.checks] == ["submission_files"] and time.monotonic() - t < 30


def test_a_link_inside_the_submission_is_kept(tmp_path):
    """A symlink to one of its own files is the submitter's own bytes; its bytecode and git are not inputs."""
    from infbench.serving.verify import submission

    sub = vh.example(tmp_path / "subs", "S0")
    (sub / "alias.py").symlink_to("server.py")
    (sub / "__pycache__").mkdir()
    (sub / "__pycache__" / "server.cpython-311.pyc").write_bytes(b"crafted")
    (sub / "stray.pyc").write_bytes(b"crafted")
    record = _run(_fake_env(tmp_path), sub)
    assert _checks(record)["submission_files"].passed and record.failed_check != "submission_files"
    assert submission.files(sub) == [str(sub / "server.py"), str(sub / "submission.yaml")]
    with submission.workspace(sub) as copy:  # what the server runs from: links as links, no bytecode
        assert sorted(p.name for p in copy.iterdir()) == ["alias.py", "server.py", "submission.yaml"]
        assert (copy / "alias.py").is_symlink() and (copy / "alias.py").read_text() == (sub / "server.py").read_text()


def test_a_health_path_naming_another_host_is_refused(tmp_path):
    """``@host:port/x`` once turned the health URL into a request to that address (which answered 200, and
    ``launch`` passed with no server in the sandbox): now the spec is refused and nothing reaches it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        s.settimeout(0.5)
        port = s.getsockname()[1]
        spec = {
            "command": SLEEPER,
            "model": "smollm2-135m",
            "concurrency": 1,
            "startup_timeout_s": 3,
            "health_path": f"@127.0.0.1:{port}/x",
        }
        record = _run(_fake_env(tmp_path), vh.submission_dir(tmp_path / "subs", "elsewhere", spec))
        with pytest.raises(TimeoutError):
            s.accept()
    assert record.failed_check == "submission_spec" and "field 'health_path'" in record.failure, record.failure
    assert "is not a plain absolute path" in record.failure


SHOW_ENVIRON = """import os, sys
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    print(pid, open(f"/proc/{pid}/environ", "rb").read(), flush=True)
try:
    stray = open("stray.pyc", "rb").read()
except OSError as exc:
    stray = exc.strerror
print("bytecode:", os.path.exists("__pycache__"), stray, os.path.exists(".git/config"), os.getcwd())
from infbench.serving.instant import main
main(sys.argv[1:])
"""


def test_no_process_of_a_server_has_the_jobs_environment(tmp_path, monkeypatch):
    """Every process in the server's sandbox (the relay, the server) holds the allowlisted environment: not the
    operator's secret the job holds, nor anything else of the job's environment. It runs from a fresh copy
    of its directory at /submission, bytecode and git left out (the server runs its sources)."""
    from infbench.config.model import SandboxSettings
    from infbench.serving import servers
    from infbench.serving.verify import submission

    monkeypatch.setenv("INFBENCH_OPERATOR_SECRET", "s3cret-of-this-round")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "k3y")
    spec = {"command": ["{python}", "show_environ.py", "--port", "{port}"], "model": "smollm2-135m", "concurrency": 1}
    sub = vh.submission_dir(tmp_path / "subs", "environ", spec)
    (sub / "show_environ.py").write_text(SHOW_ENVIRON)
    for name in ("__pycache__", ".git"):
        (sub / name).mkdir()
    (sub / "__pycache__" / "show_environ.cpython-311.pyc").write_bytes(b"crafted")
    (sub / "stray.pyc").write_bytes(b"crafted")
    (sub / ".git" / "config").write_text("[core]\n")
    log = tmp_path / "server.log"
    with (
        submission.workspace(sub) as copy,
        submission.running(
            submission.load(sub), servers.LaunchVars(), str(copy), log, SandboxSettings.model_validate(SANDBOX)
        ) as server,
    ):
        assert server.sandbox.kind == "bwrap" and server.sandbox.mounts["/submission"] == str(copy)
    shown = log.read_text()
    assert "bytecode: False No such file or directory False /submission" in shown
    assert shown.count("PATH=") >= 2 and "HOME=/tmp" in shown  # the relay's and the server's
    assert "s3cret-of-this-round" not in shown and "k3y" not in shown and "INFBENCH_OPERATOR_SECRET" not in shown


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_a_declared_port_is_its_own_and_a_silent_server_is_reaped(tmp_path):
    """In its own network namespace a submission's declared port cannot clash with the host's; one that never
    becomes healthy fails 'launch' and leaves no process behind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]  # busy on the host
        spec = {"command": SLEEPER, "model": "smollm2-135m", "concurrency": 1, "port": port, "startup_timeout_s": 2}
        t = time.monotonic()
        record = _run(_fake_env(tmp_path), vh.submission_dir(tmp_path / "subs", "sleepy", spec))
    assert record.failed_check == "launch" and "not healthy" in record.failure and time.monotonic() - t < 30
    assert record.sandbox.kind == "bwrap" and "relay" in record.sandbox.network
    assert not _processes_with(f"infbench-test-sleeper-{port}"), "the server process was not reaped"


@pytest.mark.slow
def test_server_reading_the_verifiers_files_is_rejected(env, tmp_path):
    """A server that opens the verification reference (held-out answers, probe prompts) to answer from it: the
    file does not exist in its sandbox, so it never comes up."""
    sub = vh.example(tmp_path / "subs", "S0", startup_timeout_s=120).rename(tmp_path / "subs" / "reader")
    (sub / "cheat.py").write_text(
        f"import runpy, sys\nanswers = open({str(env['ref'])!r}).read()\n"
        "sys.argv[0] = 'server.py'\nrunpy.run_path('server.py', run_name='__main__')\n"
    )
    spec = yaml.safe_load((sub / "submission.yaml").read_text())
    spec["command"] = [a.replace("server.py", "cheat.py") for a in spec["command"]]
    (sub / "submission.yaml").write_text(yaml.safe_dump(spec))
    record = _run(env, sub)
    assert record.failed_check == "launch" and "before it was healthy" in record.failure, record.failure
    assert (
        f"FileNotFoundError: [Errno 2] No such file or directory: '{env['ref']}'" in Path(record.server_log).read_text()
    )


def test_the_failed_check_is_the_first_failure_in_the_documented_order():
    """Context probes run while the server is up, the replay checks after teardown: a server failing both is
    named by complete_prompts, which the documented order puts first."""
    from infbench.checks import Check
    from infbench.serving.verify.record import CHECK_ORDER, in_documented_order

    ran = [
        Check(name=n, passed=n not in ("context_probes", "complete_prompts"), summary=n)
        for n in (
            "submission_files",
            "submission_spec",
            "requirements",
            "launch",
            "context_probes",
            "natural_stopping",
            "held_out_answers",
            "server_alive",
            "complete_prompts",
            "exact_output_lengths",
            "streaming_consistency",
            "session_progress",
            "fidelity",
        )
    ]
    ordered = in_documented_order(ran)
    assert [c.name for c in ordered] == [n for n in CHECK_ORDER if n in {c.name for c in ran}]
    assert next(c for c in ordered if not c.passed).name == "complete_prompts"


def test_examples_are_valid_submissions():
    from infbench.serving.verify import submission

    for directory in (
        *(REPO / "examples/servers" / n for n in ("S0", "llamacpp")),
        REPO / "examples/servers-vllm/vllm",
    ):
        sub = submission.load(directory)
        name = directory.name
        assert sub.name == name and sub.model == "smollm2-135m" and sub.concurrency >= 1


def test_plan_one_verify_job_per_submission(tmp_path):
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    extra = tmp_path / "subs"
    cfg["serving"]["submissions"] = [str(REPO / "examples/servers"), str(extra)]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    target = "results/tables/serving_verified.md"
    jobs = planned_jobs(run_snakemake(tmp_path, "-n", target, "--configfile", str(path)))
    assert jobs["serving_verify"] == 2 and jobs["serving_verification_reference"] == 1
    shutil.copytree(REPO / "examples/servers/S0", extra / "S0copy")
    proc = run_snakemake(tmp_path, "-n", target, "--configfile", str(path))
    assert planned_jobs(proc)["serving_verify"] == 3 and "results/serving/verification/S0copy.json" in proc.stdout


# Token-level truth, suspects over the whole replay, probes drawn with the operator's secret: no server needed.


def test_streamed_text_must_be_the_ids_text(smollm2_source):
    """Exactly as the source tokenizer decodes the ids; a special token may be written or omitted whole, and a
    character still incomplete at the end may be held back, with the rest of the pieces of the tokens holding its
    bytes; nothing else (whitespace included) may differ."""
    from infbench.serving.verify.source_text import SourceText

    text = SourceText.load(smollm2_source[0] / "hf")
    ids = text.tokenizer.encode("héllo 😀 wörld", add_special_tokens=False)
    assert text.mismatch(ids, "héllo 😀 wörld") is None
    assert "first difference at character 5" in text.mismatch(ids, "héllo😀 wörld")  # whitespace counts
    assert text.mismatch(ids, "héllo 😀 wörld ") is not None  # extra text
    cut = ids[:4]  # ends inside the emoji's bytes: decodes to U+FFFD
    assert text.decode(cut).endswith("\ufffd")
    assert text.mismatch(cut, "héllo ") is None and text.mismatch(cut, "héllo \ufffd") is None
    # ... or its last token's whole piece, " \xf0\x9f" (llama.cpp's streaming detokenizer), but no more
    assert text.decode(cut[-1:]) == " \ufffd" and text.mismatch(cut, "héllo") is None
    assert text.mismatch(cut, "héll") is not None and text.mismatch(ids[:3], "héll") is not None
    mid = cut + ids[5:]  # an invalid sequence inside: its U+FFFD must be there
    assert text.mismatch(mid, text.decode(mid)) is None and text.mismatch(mid, text.decode(mid).replace("\ufffd", ""))
    eos = ids[:2] + [2] + ids[2:]  # <|im_end|> in the middle
    assert text.mismatch(eos, "hé<|im_end|>llo 😀 wörld") is None and text.mismatch(eos, "héllo 😀 wörld") is None
    assert text.mismatch(eos, "hé<|im_end|llo 😀 wörld") is not None
    assert "outside the source vocabulary" in text.mismatch([10**6], "x")


def test_a_tokenizer_that_cannot_load_is_a_failure_with_its_cause(tmp_path):
    from infbench.serving.verify.source_text import SourceText, TokenizerUnavailable

    with pytest.raises(TokenizerUnavailable, match=f"tokenizer of {tmp_path / 'none'} could not be loaded"):
        SourceText.load(tmp_path / "none")


def test_each_lie_about_the_stream_is_named(smollm2_source):
    import pandas as pd

    from infbench.serving.verify import replay_checks
    from infbench.serving.verify.source_text import SourceText

    text = SourceText.load(smollm2_source[0] / "hf")
    ids = text.tokenizer.encode(" the cat sat", add_special_tokens=False)
    honest = dict(
        session_id="s",
        instance=0,
        request_id="main/0",
        error="",
        input_tokens=5,
        usage_prompt_tokens=5,
        max_tokens=len(ids),
        output_tokens=len(ids),
        usage_completion_tokens=len(ids),
        n_chunks=len(ids),
        id_chunks=len(ids),
        text_chunks_without_ids=0,
        counts_from_token_ids=True,
        streamed_token_ids=ids,
        text=" the cat sat",
        in_window=True,
        ok=True,
        instance_requests=1,
        send_time=0.0,
        end_time=1.0,
    )
    lies = {
        "fake first token": ({"text_chunks_without_ids": 1, "text": "  the cat sat"}, "carried text without token ids"),
        "usage only": (
            {"counts_from_token_ids": False, "streamed_token_ids": [], "id_chunks": 0},
            "no token ids streamed",
        ),
        "usage too high": (
            {"usage_completion_tokens": len(ids) + 1, "error": "usage.completion_tokens=4 but 3"},
            "usage.completion_tokens=4",
        ),
        "no usage": ({"usage_completion_tokens": None}, "usage.completion_tokens not reported"),
        "other text": ({"text": " the dog sat"}, "not the token ids' text"),
    }
    assert replay_checks.stream_problem(pd.Series(honest), text) is None
    frame = pd.DataFrame([honest] + [honest | change for change, _ in lies.values()])
    check = replay_checks.streaming_consistency(frame, text)
    assert not check.passed and check.evidence["inconsistent"] == len(lies)
    for (_change, why), example in zip(lies.values(), check.evidence["examples"]):
        assert why in example, (why, example)
    nothing = replay_checks.streaming_consistency(frame.iloc[:0], text)
    assert not nothing.passed and "no answered request" in nothing.summary  # no check passes by default
    assert not replay_checks.exact_output_lengths(frame.iloc[:0]).passed


def test_probes_and_questions_follow_the_operator_secret(smollm2_source, tmp_path):
    """Context-probe fillers, EOS-probe candidates and held-out questions change with the secret, and no
    public config value seeds them."""
    from transformers import AutoTokenizer

    from infbench.config.model import VerifySettings
    from infbench.serving.verify import probes, reference

    tok = AutoTokenizer.from_pretrained(smollm2_source[0] / "hf")
    a, b = vh.secret(), vh.secret("operator round 7", tmp_path)
    assert a.label == "public demo" and b.label.startswith("operator secret ")
    assert reference.candidate_prompts(tok, 8, (1000, 30000), a) == reference.candidate_prompts(
        tok, 8, (1000, 30000), a
    )
    assert reference.candidate_prompts(tok, 8, (1000, 30000), a) != reference.candidate_prompts(
        tok, 8, (1000, 30000), b
    )
    chats = [tok.decode(p) for p in reference.candidate_prompts(tok, 8, (1000, 30000), b)[:4]]
    assert all("<|im_start|>user" in c for c in chats) and len(set(chats)) == 4
    fill = lambda s: probes.filler_prompt(64, (1000, 30000), s.seed("serving.context_probe", 0))  # noqa: E731
    assert fill(a) != fill(b)
    settings = VerifySettings.model_validate(vh.serving_config(CONTEXT, answers_n=6)["verification"])
    questions = lambda s: [q.id for q, _ in reference.select_questions(vh.answer_settings(), settings, s)]  # noqa: E731
    assert questions(a) != questions(b) and len(questions(b)) == 6
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    verification = schema["properties"]["serving"]["properties"]["verification"]["properties"]
    assert not [k for k in verification if "seed" in k]


def test_suspects_are_sampled_over_the_whole_window():
    """One sampled suspect per equal time stratum of the window, from every seed's records, drawn with the
    secret's seed: the end of a replay is sampled as often as its start."""
    import numpy as np

    from infbench.serving.verify import fidelity

    cands = [fidelity.fixed(f"r{i}", [1], [2]) for i in range(900)]
    for i, c in enumerate(cands):
        c.position = (i % 300) / 300 + (0.002 if i < 600 else 0.0)  # three seeds' windows, 300 requests each
    picks = fidelity.stratified(cands, 8, np.random.default_rng(1))
    assert sorted(s for s, _ in picks) == list(range(8))
    assert all(s / 8 <= c.position < (s + 1) / 8 for s, c in picks)
    again = fidelity.stratified(cands, 8, np.random.default_rng(1))
    other = fidelity.stratified(cands, 8, np.random.default_rng(2))
    assert [c.origin for _, c in again] == [c.origin for _, c in picks] != [c.origin for _, c in other]
    late = [c for c in cands if c.position >= 0.9]  # strata left empty give their draws away
    assert len(fidelity.stratified(late, 8, np.random.default_rng(1))) == 8


def test_a_vllm_server_without_the_vllm_environment_stops_the_job(env, tmp_path, monkeypatch):
    """The machine's setup, not the submission, is at fault: no record, one line naming the interpreter."""
    import infbench.vllm_env
    from infbench.vllm_env import VllmEnvironmentMissing

    monkeypatch.setattr(infbench.vllm_env, "vllm_python", lambda: tmp_path / "no-venv/bin/python")
    with pytest.raises(VllmEnvironmentMissing, match=r"no-venv/bin/python: the vLLM environment is not installed"):
        _run(env, vh.example(tmp_path, "vllm", root_in_repo="examples/servers-vllm"))
