import pytest

from infbench import atomic


def test_success_replaces_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    atomic.write_text(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_failure_keeps_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_failed_directory_never_appears(tmp_path):
    target = tmp_path / "ckpt"
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(target, directory=True) as tmp:
            (tmp / "weights").write_text("partial")
            raise RuntimeError("crash")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_outputs_get_ordinary_permissions(tmp_path):
    atomic.write_text(tmp_path / "a.txt", "x")
    assert (tmp_path / "a.txt").stat().st_mode & 0o044 == 0o044
