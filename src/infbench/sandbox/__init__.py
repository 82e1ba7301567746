"""One OS sandbox for the untrusted code of both tracks (CompressionBench packages, ServerBench servers).

- :mod:`.policy`: what a sandboxed process sees (read-only binds of exactly what it needs, neutral mounts of
  what the caller gives it, a private ``/tmp`` and ``/dev/shm``, an allowlisted environment);
- :mod:`.runtime`: the Python runtime as an allowlist (the requirement closure of the modules a program
  needs), with :mod:`.weightlike` leaving out weight-like files inside it;
- :mod:`.bwrap`: the bubblewrap command line for a policy, and whether bubblewrap works here;
- :mod:`.seccomp`: the system calls allowed inside (an allowlist; everything else fails);
- :mod:`.launch`: start a command under a policy in its own memory cgroup; the record says ``bwrap`` or
  ``none`` (and why), and how memory was accounted;
- :mod:`.cgroup`: a memory cgroup per sandbox (v1 or v2): what the kernel charges it, a hard limit;
- :mod:`.meter`: memory of a sandbox, read by the parent (the cgroup's charge, or ``/proc`` where there is no
  cgroup, never reported by the sandboxed code), and a 10 ms peak sampler;
- :mod:`.output`: a sandbox's stdout and stderr as pipes the parent copies into the log;
- :mod:`.relay`: how a server in its own network namespace is still reachable on the host's loopback.

Nothing measured inside a sandboxed process is part of a verdict.
"""
