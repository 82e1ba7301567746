"""``infbench reward`` on a template package (examples/starter_submission) packs it with the task's source."""

import shutil
from pathlib import Path

import pytest
import yaml

from infbench.compression.baselines.package import from_template
from infbench.compression.submission import load_manifest
from infbench.errors import InputFileError
from infbench.layout import Layout

REPO = Path(__file__).resolve().parents[2]


def test_the_starter_template_is_packed_with_the_source_checkpoint(tmp_path):
    checkpoint = tmp_path / "results" / "sources" / "src" / "hf"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    package = from_template(REPO / "examples" / "starter_submission", Layout(str(tmp_path / "results")), "src")
    assert package == tmp_path / "results" / "reward" / "packages" / "src" / "starter_submission"
    assert load_manifest(package).source == "src"
    assert (package / "model" / "model.safetensors").read_bytes() == b"weights"
    assert (package / "inference.py").read_text() == (REPO / "examples/starter_submission/inference.py").read_text()


def test_a_finished_package_is_used_as_is(tmp_path):
    package = tmp_path / "mine"
    shutil.copytree(REPO / "examples" / "starter_submission", package)
    manifest = yaml.safe_load((package / "manifest.yaml").read_text())
    (package / "manifest.yaml").write_text(yaml.safe_dump({**manifest, "source": "src"}))
    assert from_template(package, Layout(str(tmp_path / "results")), "src") == package


def test_a_template_without_the_source_checkpoint_names_it(tmp_path):
    with pytest.raises(InputFileError, match="sources/src/hf"):
        from_template(REPO / "examples" / "starter_submission", Layout(str(tmp_path / "results")), "src")
