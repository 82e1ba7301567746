"""One OS sandbox for the untrusted code of both tracks (CompressionBench packages, ServerBench servers).

- :mod:`.policy`: what a sandboxed process sees (read-only binds of exactly what it needs, model files of the
  runtime hidden, a private ``/tmp``, an allowlisted environment);
- :mod:`.bwrap`: the bubblewrap command line for a policy, and whether bubblewrap works here;
- :mod:`.launch`: start a command under a policy; the record says ``bwrap`` or ``none`` (and why);
- :mod:`.meter`: memory of every process in a sandbox, read by the parent from ``/proc`` (never reported by the
  sandboxed code), and a 10 ms peak sampler;
- :mod:`.relay`: how a server in its own network namespace is still reachable on the host's loopback.

Nothing measured inside a sandboxed process is part of a verdict.
"""
