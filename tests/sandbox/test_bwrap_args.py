"""The order of bubblewrap's arguments, checked without running it (CI has no GPU: the GPU path under the sandbox
failed on the H200 only, "Can't create file at /dev/nvidia-uvm: Read-only file system")."""

from infbench.sandbox import bwrap
from infbench.sandbox.policy import Policy

# bubblewrap options that make something at their last argument (a mount point it creates in the parent
# directory), with how many arguments each takes
MAKES = {
    "--bind": 2,
    "--ro-bind": 2,
    "--dev-bind": 2,
    "--tmpfs": 1,
    "--proc": 1,
    "--dev": 1,
    "--symlink": 2,
    "--dir": 1,
}


def _under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def mounts_below_read_only(args: list[str]) -> list[str]:
    """Every path bubblewrap would make inside a directory already remounted read-only (it cannot)."""
    read_only, bad, i = [], [], 0
    while i < len(args) and args[i] != "--":
        option = args[i]
        if option == "--remount-ro":
            read_only.append(args[i + 1])
            i += 2
        elif option in MAKES:
            dest = args[i + MAKES[option]]
            bad += [f"{option} {dest} after --remount-ro {d}" for d in read_only if dest != d and _under(dest, d)]
            i += 1 + MAKES[option]
        else:
            i += 1
    return bad


def gpu_policy() -> Policy:
    """A policy with everything a CUDA worker's has: GPU device nodes, a site directory bound entry by entry
    with a file covered inside it, a covered system file, the package mount."""
    return Policy(
        read_only=("/usr", "/sys", "/venv/lib/site-packages/torch", "/venv/lib/site-packages/numpy"),
        site_dirs=("/venv/lib/site-packages",),
        links=(("python3.11", "/venv/bin/python"),),
        covered=("/usr/lib/python3/dist-packages/model.gguf", "/venv/lib/site-packages/torch/weights.bin"),
        mounts={"/package": "/tmp/staged/package"},
        env={"PATH": "/usr/bin"},
        devices=("/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"),
        tmp_bytes=1 << 30,
    )


def test_nothing_is_mounted_inside_a_directory_after_it_is_made_read_only():
    args = bwrap.argv(gpu_policy(), ["python", "-c", "pass"], info_fd=3, seccomp_fd=4)
    assert mounts_below_read_only(args) == []
    for dev in gpu_policy().devices:  # every device node is bound, and /dev is still made read-only
        i = args.index(dev)
        assert args[i - 1 : i + 2] == ["--dev-bind", dev, dev]
    pairs = list(zip(args, args[1:]))
    assert ("--remount-ro", "/dev") in pairs and ("--remount-ro", "/") in pairs and ("--seccomp", "4") in pairs


def test_the_check_sees_the_order_that_failed_on_the_h200():
    """The check itself: the argument order of the last round (device nodes bound after ``--remount-ro /dev``)."""
    failed = ["bwrap", "--dev", "/dev", "--remount-ro", "/dev", "--dev-bind", "/dev/nvidia-uvm", "/dev/nvidia-uvm"]
    assert mounts_below_read_only(failed) == ["--dev-bind /dev/nvidia-uvm after --remount-ro /dev"]
