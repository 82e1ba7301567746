"""Answer evaluation shared by both tracks: the questions, prompts and judging of GSM8K, HumanEval and
TriviaQA, and greedy generation with stop sequences.

CompressionBench's accuracy gate (PROTOCOL A5.2): GSM8K (4-shot, 320 tokens, final number), HumanEval
(0-shot, 384 tokens, unit tests, judged in sandboxes by :mod:`infbench.sandbox.judge`) and TriviaQA
(5-shot, 24 tokens, normalised aliases), greedy, the same questions for the source and every candidate;
a candidate passes iff ``A(a) >= rho * A(p)``. ServerBench's held-out answers
(drawn and answered by :mod:`infbench.serving.verify.reference`, a server's checked by
:mod:`infbench.serving.verify.answers`) come from the same question sets, prompts, generation and judging.

Modules: :mod:`.registry` (what each benchmark is: ``specs/<name>.yaml``), :mod:`.questions`
(question sets, ``data/``, the seeded selection), :mod:`.prompts`, :mod:`.judge` (extraction and
normalisation, the HumanEval case), :mod:`.templates` (GSM8K-style problems drawn by a seed),
:mod:`.generation` (stop sequences, the EOS ids, transformers' greedy generation), :mod:`.driver`
(``evaluate``, ``gate``), :mod:`.results` (records and files). CompressionBench's ``A(p)`` and gate drive the
model themselves (:mod:`infbench.compression.accuracy`).
"""
