"""Provenance names every library on the measured path and how llama.cpp was built."""

import subprocess
import sys

from conftest import REPO


def _versions_after(imports: str) -> dict:
    code = (
        f"{imports}\nimport json\nfrom infbench import provenance\n"
        "p = provenance.collect({})\nprint(json.dumps({'versions': p.versions, 'builds': p.builds}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": ""},
    ).stdout
    import json

    return json.loads(out.splitlines()[-1])


def test_the_replay_clients_libraries_are_recorded_once_imported():
    plain = _versions_after("")["versions"]
    replay = _versions_after("import aiohttp, uvloop, orjson, multidict")["versions"]
    assert "multidict" not in plain  # neither imported nor tracked
    assert {"aiohttp", "uvloop", "orjson", "multidict"} <= set(replay)


def test_tracked_libraries_are_recorded_without_being_imported():
    """GPTQModel and llama.cpp may run only in a package's worker process; the job's record still names them."""
    found = _versions_after("")
    assert {"gptqmodel", "llama-cpp-python", "torch", "transformers", "infbench"} <= set(found["versions"])
    assert "AVX2 = 1" in found["builds"]["llama-cpp-python"]
