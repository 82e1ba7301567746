"""Conda environments for `--sdm conda`: every rule's env file exists, and every
package in every env file is pinned."""

import re

import pytest
import yaml

from conftest import REPO

ENVS = sorted((REPO / "envs").glob("*.yaml"))


def test_the_rule_groups_have_env_files():
    assert {p.stem for p in ENVS} >= {"compression-cpu", "gptq", "llama-cpp", "serving", "vllm", "sglang"}


def test_every_conda_directive_names_an_existing_env():
    rules = (REPO / "workflow/rules")
    text = "".join(p.read_text() for p in rules.glob("*.smk"))
    named = set(re.findall(r'"\.\./\.\./(envs/[\w.-]+\.yaml)"', text))
    assert {"envs/compression-cpu.yaml", "envs/vllm.yaml"} <= named
    assert all((REPO / path).is_file() for path in named), named


@pytest.mark.parametrize("env", ENVS, ids=lambda p: p.stem)
def test_env_is_pinned(env):
    spec = yaml.safe_load(env.read_text())
    for dep in spec["dependencies"]:
        if isinstance(dep, dict):
            for req in dep["pip"]:
                assert req == "-e ../" or re.fullmatch(r"[\w.\[\],-]+==[\w.]+", req), (env.name, req)
        else:
            assert dep == "pip" or re.fullmatch(r"[\w.-]+=[\w.]+", dep), (env.name, dep)
    post_deploy = env.with_name(env.stem + ".post-deploy.sh")
    uses_pip_e = any(isinstance(d, dict) and "-e ../" in d["pip"] for d in spec["dependencies"])
    assert uses_pip_e or "pip install --no-deps -e" in post_deploy.read_text(), env.name
