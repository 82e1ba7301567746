"""S_pkg and the content hash cover every name in a package; links out of it are rejected."""

import json
import os
from datetime import UTC, datetime

import pytest

from infbench.package_files import PackageFilesError, content_hash, package_bytes
from infbench.runs import versions
from infbench.runs.jsonl import RunError


@pytest.fixture
def package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "model").mkdir(parents=True)
    (pkg / "manifest.yaml").write_text("name: p\n")
    (pkg / "model" / "weights.bin").write_bytes(b"w" * 1000)
    return pkg


def test_pycache_and_hidden_files_count(package):
    base_bytes, base_hash = package_bytes(package), content_hash(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "stash.cpython-311.pyc").write_bytes(b"\1" * 5000)
    assert package_bytes(package) == base_bytes + 5000
    with_cache = content_hash(package)
    assert with_cache != base_hash
    (package / "__pycache__" / "stash.cpython-311.pyc").write_bytes(b"\2" * 5000)  # same size, other bytes
    assert content_hash(package) != with_cache
    (package / ".hidden").mkdir()
    (package / ".hidden" / ".weights").write_bytes(b"h" * 700)
    assert package_bytes(package) == base_bytes + 5700


def test_symlink_out_of_the_package_is_rejected_naming_the_file(package, tmp_path):
    outside = tmp_path / "source_weights.bin"
    outside.write_bytes(b"s" * 10_000)
    os.symlink(outside, package / "model" / "extra.bin")
    for measure in (package_bytes, content_hash):
        with pytest.raises(PackageFilesError, match=r"model/extra.bin: symlink to .*source_weights.bin points outside"):
            measure(package)
    os.unlink(package / "model" / "extra.bin")
    os.symlink(tmp_path, package / "up")  # a directory link out, even one that holds the package
    with pytest.raises(PackageFilesError, match="up: symlink"):
        package_bytes(package)


def test_symlink_inside_the_package_is_counted_once(package):
    before = package_bytes(package)
    os.symlink("weights.bin", package / "model" / "alias.bin")
    assert package_bytes(package) == before + len("weights.bin")  # the link's own bytes, not the target twice
    hashed = content_hash(package)
    os.unlink(package / "model" / "alias.bin")
    os.symlink("../manifest.yaml", package / "model" / "alias.bin")
    assert content_hash(package) != hashed


def test_hard_link_to_a_file_outside_is_rejected(package, tmp_path):
    outside = tmp_path / "source_weights.bin"
    outside.write_bytes(b"s" * 10_000)
    os.link(outside, package / "model" / "copy.bin")
    with pytest.raises(PackageFilesError, match=r"model/copy.bin: hard link with 2 names, 1 of them in the package"):
        package_bytes(package)
    os.unlink(outside)  # now its only name is inside: an ordinary file
    assert package_bytes(package) == 10_000 + 1000 + len("name: p\n")


def test_hard_links_inside_the_package_count_once(package):
    before = package_bytes(package)
    os.link(package / "model" / "weights.bin", package / "weights-again.bin")
    assert package_bytes(package) == before


def test_special_files_are_rejected(package):
    os.mkfifo(package / "model" / "pipe")
    with pytest.raises(PackageFilesError, match="model/pipe: not a regular file"):
        package_bytes(package)


def test_a_run_version_with_a_link_out_is_not_ingested(tmp_path):
    folder = tmp_path / "versions" / "v1"
    folder.mkdir(parents=True)
    os.symlink("/etc/hostname", folder / "weights.bin")
    (tmp_path / "versions" / "v1.json").write_text(
        json.dumps({"published_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat()})
    )
    with pytest.raises(RunError, match="weights.bin: symlink"):
        versions.events(tmp_path / "versions")
    assert versions.events(tmp_path / "versions", hashes=False)[0].version == "v1"


def test_a_package_that_is_a_link_is_rejected(package, tmp_path):
    """Its target's files are someone else's (a results directory, say), whatever they hold."""
    (tmp_path / "linked").symlink_to(package)
    with pytest.raises(PackageFilesError, match="linked: the directory itself is a symlink to"):
        package_bytes(tmp_path / "linked")
