"""ServerBench verification (PROTOCOL B5): a submitted server rebuilt in a fresh copy, replayed on held-out
seeds and checked while it is up.

Modules: :mod:`.submission` (the ``submission.yaml`` spec, fresh copy, launch), :mod:`.replay_checks`
(complete prompts, exact output lengths, streaming consistency, session progress), :mod:`.probes` (context
and EOS probes), :mod:`.reference` (per-source EOS probe prompts and reference answers from a plain
transformers implementation), :mod:`.fidelity` (suspicious continuations scored under teacher forcing),
:mod:`.answers` (held-out answers), :mod:`.record` (the verification record and the order of its checks),
:mod:`.verification` (a job's inputs, what it found so far, the record built from it), :mod:`.verdict` (the
order the checks run in).
"""
