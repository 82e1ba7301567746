"""What CompressionBench draws from the operator's secret (:mod:`infbench.operator_secret`).

The search set follows the public config seeds, so a submitter can rebuild it;
everything final verification judges with is drawn from the secret instead, so
nobody without it can predict it:

- the verification set's documents and offsets (drawn after the search set, from
  the documents it left);
- the verification set's continuation-sampling seed;
- the accuracy gate's held-out questions;
- the integrity probes' rows, splits and positions among the scoring requests, and the rows a second,
  fresh worker is asked (check ``statefulness``).

Rules pass only the secret's fingerprint as a parameter (a changed secret reruns
what depends on it); a job loads the secret itself with :func:`infbench.operator_secret.for_job`.
"""

from __future__ import annotations

from infbench.operator_secret import OperatorSecret

SEARCH, VERIFICATION = "search", "verification"


def context_seed(secret: OperatorSecret, source: str, seed: int) -> int:
    """Seed of the verification set's draw of documents and offsets."""
    return secret.seed("verification contexts", source, seed)


def sampling_seed(set_name: str, source: str, seed: int, secret: OperatorSecret | None) -> int:
    """Continuation-sampling seed of a set: the public ``seed`` for search, drawn from the secret for verification."""
    if set_name == SEARCH:
        return seed
    if secret is None:
        raise ValueError("the verification set is sampled with a seed drawn from the operator secret")
    return secret.seed("verification sampling", source, seed)


def question_seed(secret: OperatorSecret, seed: int) -> int:
    """Seed of the accuracy gate's question selection (config ``answers.seed`` mixed with the secret)."""
    return secret.seed("accuracy gate questions", seed)


def fresh_process_seed(secret: OperatorSecret, source: str, seed: int) -> int:
    """Seed of the rows a second, fresh worker scores again (check ``statefulness``)."""
    return secret.seed("statefulness probes", source, seed)
