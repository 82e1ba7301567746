"""Ways a program can hold memory between calls, each a snippet that holds ``STASH`` bytes (``held``: what
it managed to hold where a kernel limit bounds the channel) in names of its own scope; used by the sandbox's
meter tests and the red team's packages."""

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
    "sysv_shm_after_shmdt": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True); libc.shmat.restype = ctypes.c_void_p
sid = libc.shmget(0, STASH, 0o1600); p = libc.shmat(sid, None, 0)
ctypes.memmove(p, os.urandom(STASH), STASH); libc.shmdt(ctypes.c_void_p(p))""",
    "sysv_message_queues": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
msg = ctypes.create_string_buffer(8 + 8192); msg[0] = 1
held = 0
while held < STASH:  # msgmnb (16 KiB by default) bounds one queue; a namespace has msgmni (32000) of them
    q = libc.msgget(0, 0o1600)
    while held < STASH and libc.msgsnd(q, msg, 8192, 0o4000) == 0:
        held += 8192""",
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
    "socketpair_buffers": """
import socket
pairs, held = [], 0
while held < STASH:
    a, b = socket.socketpair(); a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    a.setblocking(False); pairs.append((a, b))
    try:
        while held < STASH:
            held += a.send(os.urandom(1 << 16))
    except BlockingIOError:
        pass""",
}
# What the /proc fallback (no cgroup) sees: not SysV IPC or socket buffers (a cgroup charges them)
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


def holder(names: list[str]) -> str:
    """Python source of ``hold()``: runs each named snippet in a function of its own and returns what they hold
    (keep it alive to keep the memory held). Needs ``os``, ``time`` and ``STASH`` where it is defined."""
    lines = ["def hold():", "    kept = []"]
    for i, name in enumerate(names):
        lines.append(f"    def channel_{i}():")
        lines += ["        " + line for line in HOLD[name].strip().splitlines()]
        lines += ["        return dict(locals())", f"    kept.append(channel_{i}())"]
    return "\n".join([*lines, "    return kept"])
