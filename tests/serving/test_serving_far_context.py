"""far_context (PROTOCOL B5): a server that prefills only the end of each replay prompt fails.

The real SmolLM2-135M (not a model rescaled to depend on its context): on the replays' far-context carriers
its confident next ids copy from far back in the prompt, which a server that kept only the last W ids cannot
know. The adversary, llama.cpp on the F16 twin (transformers prefills 1,024 ids too slowly on 2 busy cores for
enough carriers to be answered), keeps the last 64, 256 or 1,024 ids of every replay prompt, reports the full
length and is honest on anything that looks like a probe; every carrier's source lies beyond W (sessions of
one request, each long enough). Real servers on loopback, in the sandbox.
"""

from __future__ import annotations

import pytest
import verify_helpers as vh
import yaml

SANDBOX = {"allow_unsandboxed": False, "tmp_mb": 512}
REQUIRES = ("torch", "transformers", "llama_cpp")
# (ids the server keeps, context limit, shared prompt tokens of every request, replay window in seconds)
CASES = [(64, 1024, 400, 12.0), (256, 1024, 400, 12.0), (1024, 2048, 1200, 40.0)]


# sessions of one request each, every prompt long enough to carry a far-context repeat
ONE_REQUEST = dict(
    first_user_tokens={"median": 48, "sigma": 0.3},
    main_turns_mean=1,
    max_main_turns=1,
    tool_result_tokens={"median": 16, "sigma": 0.1},
    output_tokens={"median": 4, "sigma": 0.0},
    max_output_tokens=4,
    think_time_s={"median": 0.05, "sigma": 0.1},
    subagent_prob=0.0,
    max_fanout=1,
    subagent_turns_mean=1,
    background_prob=0.0,
)


def _serving(context_limit: int, keep: int, window_s: float) -> dict:
    """Only what the check needs: no context or EOS probes, no questions, one fidelity suspect."""
    serving = vh.serving_config(
        context_limit,
        context_probes=0,
        eos_probes=0,
        eos_candidates=1,
        answers_n=0,
        fidelity_max_suspects=0,
        fidelity_sampled_suspects=1,
        fidelity_proxy_pool=0,
        far_context_checks=10,
    )
    serving["workload"]["far_context"]["min_distance"] = keep + 64
    serving["replay"].update({"warmup_s": 0.0, "window_s": window_s, "request_timeout_s": 60.0})
    return serving


@pytest.fixture(scope="module")
def real(tmp_path_factory, smollm2_source, smollm2_f16_twin):
    from infbench.config.model import VerifySettings
    from infbench.serving.verify import reference

    root = tmp_path_factory.mktemp("far_context")
    hf = smollm2_source[0] / "hf"
    gguf = smollm2_f16_twin
    serving = _serving(1024, 64, 10.0)
    ref = root / "reference.json"
    reference.compute(
        "smollm2-135m",
        str(hf),
        vh.answer_settings(),
        VerifySettings.model_validate(serving["verification"]),
        (1000, 30000),
        str(ref),
        vh.secret(),
    )
    return {"root": root, "hf": hf, "gguf": gguf, "ref": ref}


@pytest.mark.slow
@pytest.mark.parametrize("keep, context_limit, system_tokens, window_s", CASES, ids=[f"last{c[0]}" for c in CASES])
def test_a_server_keeping_only_the_end_of_each_prompt_fails_far_context(
    real, keep, context_limit, system_tokens, window_s
):
    root = real["root"] / f"last{keep}"
    sessions = vh.small_sessions(root, context_limit, system_tokens=system_tokens, **ONE_REQUEST)
    directory = vh.adversary(
        root / "subs",
        "keep_last",
        ["--keep", str(keep), "--engine", "llamacpp"],
        "{gguf}",
        requires=REQUIRES,
    )
    out = root / "out"
    record = vh.run_job(
        directory,
        _serving(context_limit, keep, window_s),
        vh.answer_settings(),
        real["hf"],
        real["gguf"],
        real["ref"],
        sessions,
        out,
        SANDBOX,
        vh.secret(),
    )
    checks = {c.name: c for c in record.checks}
    for name in ("complete_prompts", "exact_output_lengths", "session_progress"):
        assert checks[name].passed, (name, checks[name].summary)  # the accounting is all honest
    far = checks["far_context"]
    assert not far.passed and not record.verified, far.summary
    rows = far.evidence["carriers"]
    assert all(r["distance"] > keep for r in rows if r["carrier"]) and any(r["misses"] for r in rows), rows


# (name, adversary options, concurrency): servers that are honest where they think they are checked
HONEST_WHERE_CHECKED = [
    # finds the carriers by content (their last 16 ids occur earlier) and prefills only them whole
    ("carriers_only", ["--carrier-aware"], 1),
    # the same, with a pool of one-thread engines on every CPU it sees, at c = 4
    ("carriers_only_pool_c4", ["--carrier-aware", "--pool"], 4),
]
# by timing: cheap while requests keep coming (the replay), honest after a pause (probes, questions)
BY_TIMING = ("quiet_then_cheap", ["--honest-s", "1.0"], 1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, options, concurrency",
    [*HONEST_WHERE_CHECKED, BY_TIMING],
    ids=[c[0] for c in (*HONEST_WHERE_CHECKED, BY_TIMING)],
)
def test_a_server_honest_only_where_it_thinks_it_is_checked_fails_far_context(real, name, options, concurrency):
    """Carriers are a quarter of the requests here; the checked continuations are drawn after the replay from all
    of them, so a server honest on the carriers (found by content) or on what follows a pause (found by timing)
    and keeping the last 64 ids elsewhere misses the reference's top-1 on the ordinary ones. The pool on every
    CPU runs on the one CPU its deployment is charged for."""
    from infbench.sandbox import cpus

    root = real["root"] / name
    sessions = vh.small_sessions(root, 1024, system_tokens=400, **ONE_REQUEST)
    mode = "quiet_then_cheap" if name == "quiet_then_cheap" else "keep_last"
    directory = vh.adversary(
        root / "subs", mode, ["--keep", "64", "--engine", "llamacpp", *options], "{gguf}", requires=REQUIRES
    )
    spec = yaml.safe_load((directory / "submission.yaml").read_text())
    (directory / "submission.yaml").write_text(yaml.safe_dump({**spec, "concurrency": concurrency}))
    serving = _serving(1024, 64, 12.0)
    serving["workload"]["far_context"]["share"] = 0.25
    record = vh.run_job(
        directory,
        serving,
        vh.answer_settings(),
        real["hf"],
        real["gguf"],
        real["ref"],
        sessions,
        root / "out",
        SANDBOX,
        vh.secret(),
    )
    checks = {c.name: c for c in record.checks}
    for check in ("complete_prompts", "exact_output_lengths", "session_progress"):
        assert checks[check].passed, (check, checks[check].summary)
    far = checks["far_context"]
    assert not far.passed and not record.verified, far.summary
    ordinary = [r for r in far.evidence["carriers"] if not r["carrier"]]
    assert ordinary and any(r["misses"] for r in ordinary), far.evidence["carriers"]
    if name == "carriers_only":
        assert all(not r["misses"] for r in far.evidence["carriers"] if r["carrier"])  # honest there
    held = record.sandbox.cpus
    assert held.kind.startswith("cpuset") and held.allowed == cpus.job_cpus()[:1] and held.reachable == 1


def test_held_out_prompts_come_from_the_secret_and_keep_the_prefix_structure(tmp_path):
    """A final replay's every id follows the operator's secret (the same secret gives the same prompts,
    another secret others); equal hash ids still give equal blocks within a session instance; carriers repeat
    their source, and where they lie follows the secret too. Development prompts do not depend on it."""
    import itertools

    from infbench.config.model import ServingSettings
    from infbench.serving import workload
    from infbench.serving.replay_settings import ReplaySettings

    sessions = workload.load(vh.small_sessions(tmp_path, 1024, **GROWN))
    serving = vh.serving_config(1024)
    serving["workload"]["far_context"]["share"] = 0.5

    def prompts(secret, seed=1000):
        held_out = None if secret is None else workload.held_out_prompt_seed(secret, seed)
        core = ServingSettings.model_validate(serving).for_servers()
        settings = ReplaySettings.for_serving(core, "http://unused", 1, seed, {}, prompt_seed=held_out)
        builder = settings.prompt_builder()
        drawn = list(itertools.islice(workload.draw(sessions, seed), 6))
        built = {(i, r.id): builder.build(s, i, r) for i, s in enumerate(drawn) for r in s.requests}
        return builder, built, drawn

    a, b = vh.secret("operator round 1", tmp_path), vh.secret("operator round 2", tmp_path)
    (ba, pa, drawn), (_, pa2, _), (bb, pb, _) = prompts(a), prompts(a), prompts(b)
    assert pa == pa2 and pa.keys() == pb.keys()
    assert all(pa[k][16:48] != pb[k][16:48] for k in pa)  # no id in common beyond chance
    assert prompts(None)[1] == prompts(None)[1] != pa  # development: public, not the secret's
    carriers_a, carriers_b = set(), set()
    for i, session in enumerate(drawn):
        blocks: dict[int, list[int]] = {}
        for r in session.requests:
            p = pa[(i, r.id)]
            assert len(p) == r.input_tokens
            for j, h in enumerate(r.hash_ids[1:-1], start=1):  # full blocks after the marker's
                assert blocks.setdefault(h, p[j * 16 : (j + 1) * 16]) == p[j * 16 : (j + 1) * 16]
            for builder, found in ((ba, carriers_a), (bb, carriers_b)):
                c = builder.carrier(session, i, r.id)
                if c:
                    q = p if builder is ba else pb[(i, r.id)]
                    assert q[c.cue :] == q[c.source : c.source + c.span] and c.distance >= 64
                    found.add((i, r.id, c.source))
    assert len(carriers_a) >= 5 and carriers_a != carriers_b


# sessions whose prompts grow turn by turn, with sub-agents
GROWN = dict(
    sessions=6,
    system_tokens=128,
    first_user_tokens={"median": 48, "sigma": 0.3},
    tool_result_tokens={"median": 48, "sigma": 0.3},
    output_tokens={"median": 8, "sigma": 0.3},
    max_output_tokens=16,
    think_time_s={"median": 0.1, "sigma": 0.1},
    background_prob=0.0,
)


def test_bench_far_context_scores_each_server_as_the_check_does(tmp_path, smollm2_source):
    """``infbench bench-far-context`` on a tiny model: the reference's own greedy path never misses its top-1;
    the table has a row per distance band and a column per server."""
    from infbench.config.model import ServingSettings
    from infbench.perf import far_context as bench

    tiny = vh.tiny_model(tmp_path / "tiny", smollm2_source[0] / "hf", seed=0)
    serving = ServingSettings.model_validate(vh.serving_config(1024))
    sessions = vh.small_sessions(tmp_path, 1024, **GROWN)
    rows = bench.measure(serving, str(sessions), str(tiny), None, carriers=4, keeps=(64,))
    assert len(rows) == 4 and (rows["full_missed"] == 0).all() and (rows["full_clear"] > 0).all()
    assert (rows["distance"] >= 64).all() and "last64_missed" in rows
    md = bench.table(rows).to_markdown(index=False)
    assert "full: missed / clear" in md and "last64: missed / clear" in md
