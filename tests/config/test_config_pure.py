"""The typed config reads the config only (issue 35, item 5): importing it and validating the embedded default
imports no track module, so that
every track can import it and nothing runs back up a layer (the checks of the machine and of the tracks are
src/infbench/preflight.py's). Run in a fresh interpreter: the test process has imported the tracks already."""

import subprocess
import sys

from conftest import REPO

TRACKS = ("compression", "serving", "evaluation", "sources", "resources", "runs", "sandbox", "preflight", "plan")
PROBE = f"""
import sys
import infbench.config, infbench.config.model, infbench.config.checks, infbench.config.files, infbench.config.schema
infbench.config.files.load("config/config.yaml")  # every validator of the models run
tracks = {TRACKS!r}
print("\\n".join(m for m in sys.modules if m.split(".")[:2][-1] in tracks and m.startswith("infbench.")))
"""


def test_importing_the_config_imports_no_track():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=REPO, timeout=120
    )
    assert proc.stdout.split() == [], f"infbench.config imports {proc.stdout.split()}"


def test_the_probe_sees_a_track_when_one_is_imported():
    """The probe itself can fail: with a track imported beside the config it names it."""
    probe = PROBE.replace("import infbench.config,", "import infbench.sources, infbench.config,")
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO, timeout=120
    )
    assert "infbench.sources" in proc.stdout.split()
