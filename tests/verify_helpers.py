"""Fixtures' building blocks for the verification tests: tiny models with the SmolLM2 tokenizer,
a small workload, a serving config and submission directories."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
import yaml
from conftest import REPO, embedded_config

HERE = Path(__file__).resolve().parent


def tiny_model(out: Path, tokenizer_dir: Path, seed: int, context: int = 1024, attention_scale: float = 1.0) -> Path:
    """A random Llama (vocab of SmolLM2, hidden 32) with peaked logits and an EOS that greedy decoding
    reaches at about 5% of steps. Its continuations depend mostly on the last token; with a large
    ``attention_scale`` they depend on the whole prompt (but greedy decoding rarely reaches EOS)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(100.0)
        for layer in model.model.layers:  # attention_scale 30: continuations depend on the whole prompt
            layer.self_attn.o_proj.weight.mul_(attention_scale)
        # EOS logit = c * (h . u): the argmax at about 5% of greedy steps
        gen = torch.Generator().manual_seed(seed)
        u = torch.randn(cfg.hidden_size, generator=gen)
        u /= u.norm()
        model.lm_head.weight[tok.eos_token_id] = 0
        ids = torch.randint(1000, 30000, (16, 24), generator=gen)
        h = model.model(ids).last_hidden_state.reshape(-1, cfg.hidden_size)
        top = model.lm_head(h).max(-1).values
        z = h @ u
        c = torch.quantile(top[z > 0] / z[z > 0], 0.1)
        model.lm_head.weight[tok.eos_token_id] = c * u
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


# the synthetic generator's parameters of small_sessions: a dozen short sessions with sub-agents and background
SMALL_SESSIONS = dict(
    sessions=12,
    block_size=16,
    system_tokens=64,
    first_user_tokens={"median": 24, "sigma": 0.5},
    main_turns_mean=4,
    max_main_turns=6,
    tool_result_tokens={"median": 24, "sigma": 0.5},
    output_tokens={"median": 10, "sigma": 0.5},
    max_output_tokens=24,
    think_time_s={"median": 0.1, "sigma": 0.5},
    subagent_prob=0.3,
    max_fanout=2,
    subagent_turns_mean=2,
    background_prob=0.2,
    nominal_decode_tps=50,
)


def small_sessions(out_dir: Path, context_limit: int, **params) -> Path:
    """``out_dir/sessions.jsonl``: synthetic sessions (``SMALL_SESSIONS`` with ``params`` over it, seed 0)
    prepared for ``context_limit`` at their own lengths."""
    from infbench.serving import synthetic, workload

    out_dir.mkdir(parents=True, exist_ok=True)
    p = synthetic.SyntheticParams(**SMALL_SESSIONS | params)
    synthetic.generate(p, 0, out_dir / "trace.jsonl")
    workload.prepare(
        str(out_dir / "trace.jsonl"),
        "weka",
        length_scale=1.0,
        context_limit=context_limit,
        block_size=p.block_size,
        out_sessions=str(out_dir / "sessions.jsonl"),
        out_summary=str(out_dir / "workload.json"),
    )
    return out_dir / "sessions.jsonl"


def serving_config(context_limit: int, **verification) -> dict:
    """The embedded serving section at test size: every long-enough replay request a far-context carrier."""
    serving = embedded_config()["serving"]
    serving["deployment"]["context_limit"] = context_limit
    serving["workload"]["far_context"]["share"] = 1.0
    serving["replay"].update({"warmup_s": 0.5, "window_s": 4.0, "request_timeout_s": 20.0, "threads": 1})
    serving["seeds"]["final"] = [1000]
    serving["verification"] = {
        **serving["verification"],
        "context_probes": 1,
        "eos_probes": 2,
        "eos_candidates": 16,
        "answers_n": 4,
        "fidelity_max_suspects": 4,
        "fidelity_sampled_suspects": 4,
        "probe_timeout_s": 60,
        **verification,
    }
    return serving


def secret(value: str | None = None, tmp: Path | None = None):
    """The public demo secret, or an operator secret ``value`` (written to a file under ``tmp``)."""
    from infbench import operator_secret

    settings = {"env": "INFBENCH_TEST_SECRET_UNSET", "file": None, "require": False}
    if value is not None:
        path = tmp / f"secret-{len(value)}-{abs(hash(value))}"
        path.write_text(value)
        settings["file"] = str(path)
    return operator_secret.load(settings)


def answer_settings(gsm8k_tokens: int = 48):
    from infbench.config.model import AnswerSettings

    cfg = embedded_config()["answers"]
    cfg["gsm8k"]["max_new_tokens"] = gsm8k_tokens
    return AnswerSettings.model_validate(cfg)


def submission_dir(root: Path, name: str, spec: dict, code: dict[str, str] | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "submission.yaml").write_text(yaml.safe_dump(spec))
    for fname, src in (code or {}).items():
        shutil.copy(src, d / fname)
    return d


def adversary(
    root: Path,
    mode: str,
    extra: list[str] | None = None,
    model: str = "{model_dir}",
    requires: tuple[str, ...] = ("torch", "transformers"),
) -> Path:
    """An adversarial server (tests/adversarial_server.py) as a submission; ``requires`` are the modules its
    sandbox binds (a llama.cpp engine needs ``llama_cpp``)."""
    spec = {
        "command": [
            "{python}",
            "adversary.py",
            "--model",
            model,
            "--port",
            "{port}",
            "--mode",
            mode,
            "--context-limit",
            "{context_limit}",
            *(extra or []),
        ],
        "concurrency": 1,
        "model": "smollm2-135m",
        "requires": list(requires),
        "startup_timeout_s": 120,
    }
    return submission_dir(root, f"adv_{mode}", spec, {"adversary.py": HERE / "adversarial_server.py"})


def example(root: Path, name: str, *, root_in_repo: str = "examples/servers", **changes) -> Path:
    """A copy of the example server ``name`` (under ``root_in_repo``) in ``root``, its spec changed by ``changes``."""
    d = root / name
    shutil.copytree(REPO / root_in_repo / name, d)
    spec = yaml.safe_load((d / "submission.yaml").read_text())
    spec.update(changes)
    (d / "submission.yaml").write_text(yaml.safe_dump(spec))
    return d


def public_table(
    model_dir: Path, sessions_path: Path, serving: dict, concurrency: int = 1, instances: int = 40
) -> dict:
    """What a submitter can precompute offline: the greedy continuation of every prompt of the first
    ``instances`` session instances of each final seed's draw, as the public code and config determine them
    (the public demo secret), keyed as ``adversarial_server`` looks them up."""
    import itertools

    from adversarial_server import prompt_key
    from transformers import AutoModelForCausalLM

    from infbench.config.model import ServingSettings
    from infbench.perf.far_context import greedy
    from infbench.serving import workload
    from infbench.serving.replay_settings import ReplaySettings

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sessions = workload.load(sessions_path)
    table: dict = {"exact": {}, "by_length": {}}
    core = ServingSettings.model_validate(serving).for_servers()
    for seed in core.seeds.final:
        prompts = ReplaySettings.for_serving(
            core, "http://unused", concurrency, seed, {}, prompt_seed=workload.held_out_prompt_seed(secret(), seed)
        ).prompt_builder()
        for instance, session in enumerate(itertools.islice(workload.draw(sessions, seed), instances)):
            for r in session.requests:
                prompt = prompts.build(session, instance, r)
                out = greedy(model, prompt, r.output_tokens)
                table["exact"][prompt_key(prompt)] = out
                table["by_length"].setdefault(f"{len(prompt)}/{r.output_tokens}", out)
    return table


def run_job(directory, serving: dict, answers, model_dir, gguf, reference, sessions, out, sandbox: dict, secret):
    """The serving_verify rule's entry point on a test-size ``serving`` section (a dict, as in a config file)."""
    from infbench.config.model import SandboxSettings, ServingSettings
    from infbench.serving.verify import verdict
    from infbench.serving.verify.verification import VerifyJob

    settings = ServingSettings.model_validate(serving)
    job = VerifyJob(
        directory=str(directory),
        serving=settings.for_servers(),
        verification=settings.verification,
        answers=answers,
        sandbox=SandboxSettings.model_validate(sandbox),
        secret=secret,
        model_dir=str(model_dir),
        gguf=str(gguf),
        reference=str(reference),
        sessions=str(sessions),
        replays_dir=str(out),
        record=str(out) + ".json",
        server_log=str(out) + ".server.log",
    )
    return verdict.run_job(job)
