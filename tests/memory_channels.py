"""Ways a program can hold memory between calls, each a snippet that holds ``STASH`` bytes (``held``: what
it managed to hold where a kernel limit bounds the channel) in names of its own scope; used by the sandbox's
meter tests and the red team's packages.

``HOLD``: the memory classes a sandbox may use, each charged to its memory cgroup. ``REFUSED``: the ones it may
not (src/infbench/sandbox/seccomp.py, the sandbox's ``RLIMIT_MEMLOCK``), each raising ``OSError`` with the errno
named beside it. ``CHARGED_UNFILTERED``: those of ``REFUSED`` the meter still charges where the filter would let
them through (secret memory, SysV IPC).
"""

import pyseccomp

LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
MEMFD_SECRET, ADD_KEY = (pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) for name in ("memfd_secret", "add_key"))


def _checked(call: str, what: str) -> str:
    """A line running ``call`` (a libc call returning < 0 on failure) into ``r``, raising its errno."""
    return f"r = {call}\nif r < 0:\n    raise OSError(ctypes.get_errno(), {what!r})\n"


def _sockets_filled(connect: str) -> str:
    """Connected pairs made by ``connect`` (into ``a``, ``b``), ``a``'s send buffer filled, until STASH is queued."""
    return f"""import socket
pairs, held = [], 0
while held < STASH:
    {connect}
    a.setblocking(False); pairs.append((a, b))
    try:
        while held < STASH:
            held += a.send(os.urandom(1 << 16))
    except BlockingIOError:
        pass"""


HOLD = {
    "bytes": "blob = os.urandom(STASH)",
    "child_process": "r, w = os.pipe()\nif os.fork() == 0:\n    blob = os.urandom(STASH); os.write(w, b'x'); "
    "time.sleep(600)\nos.read(r, 1)",
    "tmp_file": "open('/tmp/blob', 'wb').write(os.urandom(STASH))",
    "dev_shm_file": "open('/dev/shm/blob', 'wb').write(os.urandom(STASH))",
    "posix_shared_memory": "from multiprocessing import shared_memory\n"
    "shm = shared_memory.SharedMemory(create=True, size=STASH); shm.buf[:] = os.urandom(STASH)",
    "unmapped_memfd": "fd = os.memfd_create('w'); os.write(fd, os.urandom(STASH))",
    "deleted_tmp_file": "f = open('/tmp/blob', 'wb+'); f.write(os.urandom(STASH)); f.flush(); os.unlink('/tmp/blob')",
    "pipe_buffers": """
import fcntl, resource
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
pipes, held = [], 0
while held < STASH:
    r, w = os.pipe(); os.set_blocking(w, False); pipes.append((r, w))
    try:  # F_SETPIPE_SZ: up to fs.pipe-max-size (1 MiB) a pipe, unless the user is past pipe-user-pages-soft
        fcntl.fcntl(w, 1031, 1 << 20)
    except PermissionError:
        pass
    try:
        while held < STASH:
            held += os.write(w, os.urandom(1 << 16))
    except BlockingIOError:
        pass""",
    "socketpair_buffers": _sockets_filled(
        "a, b = socket.socketpair(); a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)"
    ),
    # kernel memory that holds data: names of files in the private /tmp (a tmpfs: its dentries and inodes
    # are the files themselves, never reclaimed); 255 bytes of name a file
    "tmpfs_file_names": """
import base64
os.mkdir('/tmp/names')
held, i = 0, 0
while held < STASH:
    name = base64.b32encode(os.urandom(150)).decode()[:240] + f'{i:015d}'
    open(os.path.join('/tmp/names', name), 'wb').close()
    held += len(name); i += 1""",
}
# What the /proc fallback (no cgroup) sees: not socket buffers or kernel memory (a cgroup charges them)
PROC_SEES = {
    "bytes",
    "child_process",
    "tmp_file",
    "dev_shm_file",
    "posix_shared_memory",
    "unmapped_memfd",
    "deleted_tmp_file",
    "pipe_buffers",
}

# Ways to hold memory outside the count, or in kernel objects nothing needs: refused inside the sandbox
REFUSED = {
    # secret memory: the cgroup files it as page cache that is not shared memory (the old meter subtracted it);
    # mapped a piece at a time, since each mapping is locked memory bounded by RLIMIT_MEMLOCK
    "secret_memory": (
        LIBC
        + "import mmap\n"
        + _checked(f"libc.syscall({MEMFD_SECRET}, 0)", "memfd_secret")
        + """fd = r
os.ftruncate(fd, STASH)
piece = 64 << 10
for offset in range(0, STASH, piece):
    m = mmap.mmap(fd, piece, offset=offset); m.write(os.urandom(piece)); m.close()""",
        "EPERM",
    ),
    # hugetlb pages: never charged to a cgroup v1 memory controller
    "hugetlb_mapping": (
        "import mmap\nm = mmap.mmap(-1, STASH, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000)",
        "EPERM",
    ),
    "hugetlb_memfd": ("fd = os.memfd_create('w', 0x4)\nos.ftruncate(fd, STASH)", "EPERM"),
    "sysv_shm_after_shmdt": (
        LIBC
        + "libc.shmat.restype = ctypes.c_void_p\n"
        + _checked("libc.shmget(0, STASH, 0o1600)", "shmget")
        + "p = libc.shmat(r, None, 0)\nctypes.memmove(p, os.urandom(STASH), STASH); libc.shmdt(ctypes.c_void_p(p))",
        "EPERM",
    ),
    "sysv_message_queues": (
        LIBC
        + """msg = ctypes.create_string_buffer(8 + 8192); msg[0] = 1
held = 0
while held < STASH:  # msgmnb (16 KiB by default) bounds one queue; a namespace has msgmni (32000) of them
"""
        + "".join("    " + line + "\n" for line in _checked("libc.msgget(0, 0o1600)", "msgget").splitlines())
        + """    q = r
    while held < STASH and libc.msgsnd(q, msg, 8192, 0o4000) == 0:
        held += 8192""",
        "EPERM",
    ),
    "posix_message_queue": (
        LIBC
        + "rt = ctypes.CDLL('librt.so.1', use_errno=True)\n"
        + _checked("rt.mq_open(b'/q', 0o102, 0o600, None)", "mq_open"),
        "EPERM",
    ),
    # mlocked memory beyond the sandbox's RLIMIT_MEMLOCK (64 KiB, which nothing inside can raise)
    "mlocked_memory": (
        LIBC
        + """import mmap, resource
try:
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (STASH, STASH))
except ValueError as exc:  # not allowed to raise the hard limit
    pass
m = mmap.mmap(-1, STASH, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS); m.write(os.urandom(STASH))
buf = (ctypes.c_char * STASH).from_buffer(m)
"""
        + _checked("libc.mlock(ctypes.addressof(buf), ctypes.c_size_t(STASH))", "mlock"),
        "ENOMEM",
    ),
    # a ramfs of its own in a new user and mount namespace: page cache that no reclaim can drop
    "ramfs_in_a_user_namespace": (
        LIBC + _checked("libc.unshare(0x10000000 | 0x00020000)", "unshare"),
        "EPERM",
    ),
    # TCP buffers on its own loopback: not charged to a cgroup v1 memory controller (a package worker opens Unix
    # sockets only)
    "tcp_loopback_buffers": (
        "import socket\nsrv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n"
        + _sockets_filled("a = socket.create_connection(srv.getsockname()); b, _ = srv.accept()"),
        "EPERM",
    ),
    "kernel_keyring": (
        LIBC + _checked(f"libc.syscall({ADD_KEY}, b'user', b'stash', os.urandom(32000), 32000, -3)", "add_key"),
        "EPERM",
    ),
}
CHARGED_UNFILTERED = {"secret_memory", "sysv_shm_after_shmdt", "sysv_message_queues"}


def holder(names: list[str]) -> str:
    """Python source of ``hold()``: runs each named snippet (of ``HOLD`` or ``REFUSED``) in a function of its own and
    returns what they hold (keep it alive to keep the memory held). Needs ``os``, ``time`` and ``STASH`` where it
    is defined."""
    lines = ["def hold():", "    kept = []"]
    for i, name in enumerate(names):
        code = HOLD[name] if name in HOLD else REFUSED[name][0]
        lines.append(f"    def channel_{i}():")
        lines += ["        " + line for line in code.strip().splitlines()]
        lines += ["        return dict(locals())", f"    kept.append(channel_{i}())"]
    return "\n".join([*lines, "    return kept"])


# An honest program that touches every file it can see: it opens and reads each, and looks up a name beside each
# that is not there, as an import system does (the token makes the names new to the kernel on every run): the
# page cache of the read-only files and the dentries and inodes of all it looked at, none of which holds data.
READ_EVERY_FILE = """
token = os.urandom(6).hex()
files_read = 0
for directory, dirs, files in os.walk('/'):
    if directory.startswith(('/proc', '/sys', '/dev')):
        dirs[:] = []
        continue
    for name in files:
        path = os.path.join(directory, name)
        try:
            with open(path, 'rb') as f:
                f.read(4096)
            files_read += 1
        except OSError:
            pass
        os.path.exists(path + '.' + token)
"""
