"""The accuracy gate of CompressionBench final verification (PROTOCOL A5.2).

GSM8K (4-shot, 320 tokens, final number), HumanEval (0-shot, 384 tokens, unit
tests, judged in sandboxes by :mod:`infbench.sandbox.judge`) and TriviaQA
(5-shot, 24 tokens, normalised aliases), greedy, the same questions for the
source and every candidate; a candidate passes iff ``A(a) >= rho * A(p)``.

Modules: :mod:`.settings` (the ``answers`` config section), :mod:`.questions`
(question sets and the seeded selection), :mod:`.prompts`, :mod:`.judge`
(extraction and normalisation, the HumanEval case), :mod:`.driver`
(``evaluate``, ``gate``), :mod:`.results` (records and files),
:mod:`.hf_generate` (a transformers ``generate_fn``), :mod:`.reference` (the
frozen ``A(p)`` of a source).
"""
