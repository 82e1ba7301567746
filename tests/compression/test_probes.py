"""Integrity probes shaped as scoring requests, on a real (tiny) transformers model."""

import numpy as np
import pytest
import torch

from infbench.compression import probes, scoring

N, L, M, BATCH = 7, 12, 6, 3


@pytest.fixture(scope="module")
def rows(tiny_llama):
    rng = np.random.default_rng(0)
    return (rng.integers(0, 97, size=(N, L)).astype(np.int32), rng.integers(0, 97, size=(N, M)).astype(np.int32))


def _honest(model):
    @torch.inference_mode()
    def logits(ids, n_last):
        return model(input_ids=torch.as_tensor(ids), logits_to_keep=n_last).logits.float().numpy()

    return logits


def _peeking(model, bonus=8.0):
    """Adds ``bonus`` to the next input token's logit, only on calls shaped as scoring (``n_last == M``)."""
    honest = _honest(model)

    def logits(ids, n_last):
        out = honest(ids, n_last)
        if n_last == M:
            nxt = ids[:, ids.shape[1] - n_last + 1 :]
            out[np.arange(len(ids))[:, None], np.arange(n_last - 1)[None, :], nxt] += bonus
        return out

    return logits


def test_probes_have_the_shape_of_scoring_requests(rows):
    contexts, continuations = rows
    schedule = probes.plan(contexts, continuations, BATCH, 2, seed=11)
    scoring_shapes = {r.ids.shape for r in schedule if r.kind == "score"}
    assert scoring_shapes == {(3, L + M - 1), (1, L + M - 1)}
    assert all(r.ids.shape in scoring_shapes and r.ids.dtype == np.int64 for r in schedule)
    assert sorted(np.concatenate([r.rows for r in schedule if r.kind == "score"])) == list(range(N))
    assert [r.kind for r in schedule].count("causality") == 2 and len(schedule) == 3 + 3 * 2
    inputs = np.concatenate([contexts, continuations[:, :-1]], axis=1)
    for r in schedule:
        if r.kind == "causality":  # a real row up to the split, another real row's tokens after it
            for k, (row, donor, same) in enumerate(zip(r.rows, r.donors, r.last_same)):
                split = L + same
                assert donor != row and (r.ids[k, :split] == inputs[row, :split]).all()
                assert (r.ids[k, split:] == inputs[donor, split:]).all()
        else:
            assert (r.ids == inputs[r.rows]).all()
    other = probes.plan(contexts, continuations, BATCH, 2, seed=12)
    assert [r.kind for r in other] != [r.kind for r in schedule]  # positions follow the seed
    again = probes.plan(contexts, continuations, BATCH, 2, seed=11)
    assert [r.kind for r in again] == [r.kind for r in schedule]


def test_honest_model_passes_and_scores_as_the_scorer(tiny_llama, rows):
    contexts, continuations = rows
    scored, answered = probes.run(
        _honest(tiny_llama), probes.plan(contexts, continuations, BATCH, 2, seed=3), continuations, progress=False
    )
    expected = scoring.score_continuations(
        lambda ids, n: torch.from_numpy(_honest(tiny_llama)(ids.numpy(), n)),
        contexts,
        continuations,
        batch_size=BATCH,
        progress=False,
    )
    np.testing.assert_array_equal(scored, expected)
    checks = {c.name: c for c in probes.checks(scored, answered, tolerance=1e-4)}
    assert set(checks) == {"causality", "batch_invariance", "determinism"}
    assert all(c.passed for c in checks.values()), checks


def test_peeking_only_on_scoring_shaped_calls_fails_causality(tiny_llama, rows):
    contexts, continuations = rows
    scored, answered = probes.run(
        _peeking(tiny_llama), probes.plan(contexts, continuations, BATCH, 1, seed=3), continuations, progress=False
    )
    honest, _ = probes.run(
        _honest(tiny_llama), probes.plan(contexts, continuations, BATCH, 0, seed=3), continuations, progress=False
    )
    assert scored.mean() > honest.mean() + 1  # the peek buys likelihood
    checks = {c.name: c for c in probes.checks(scored, answered, tolerance=0.05)}
    assert not checks["causality"].passed and checks["causality"].evidence["max_abs_logprob_diff"] > 1
    assert checks["batch_invariance"].passed and checks["determinism"].passed


def test_batch_dependence_and_nondeterminism_are_caught(tiny_llama, rows):
    contexts, continuations = rows
    honest = _honest(tiny_llama)
    rng = np.random.default_rng(0)

    def batch_dependent(ids, n_last):  # each row's logits shift with the rest of its batch
        return honest(ids, n_last) + 0.5 * np.sin(ids.sum()) * (np.arange(97) % 2)

    def noisy(ids, n_last):
        return honest(ids, n_last) + rng.normal(0, 0.5, size=(len(ids), n_last, 97))

    for fn, failing in [(batch_dependent, "batch_invariance"), (noisy, "determinism")]:
        scored, answered = probes.run(
            fn, probes.plan(contexts, continuations, BATCH, 1, seed=5), continuations, progress=False
        )
        assert not {c.name: c for c in probes.checks(scored, answered, tolerance=0.05)}[failing].passed


def _memoised_peeking(model, bonus=8.0):
    """Adds ``bonus`` to the next input token's logit and remembers, per causal prefix, which token got it:
    a prefix seen again gets the same answer, so every probe inside one process matches exactly."""
    honest, memo = _honest(model), {}

    def logits(ids, n_last):
        out = honest(ids, n_last)
        width = ids.shape[1]
        for b in range(len(ids)):
            for j in range(n_last):
                pos = width - n_last + j
                key = ids[b, : pos + 1].tobytes()
                if key not in memo:
                    memo[key] = int(ids[b, pos + 1]) if pos + 1 < width else None
                if memo[key] is not None:
                    out[b, j, memo[key]] += bonus
        return out

    return logits


def test_the_fresh_process_sees_stitched_rows_before_their_originals(rows):
    contexts, continuations = rows
    first, second = probes.plan_fresh(contexts, continuations, BATCH, 2, seed=4)
    inputs = np.concatenate([contexts, continuations[:, :-1]], axis=1)
    for r in (first, second):  # the size of a full scoring request, every row a real row or stitched from two
        assert r.kind == "statefulness" and r.ids.shape == (BATCH, L + M - 1) and r.ids.dtype == np.int64
        assert sorted(r.roles) == sorted(["stitched" if r is first else "original"] * 2 + ["ordinary"])
    stitched = [k for k, role in enumerate(first.roles) if role == "stitched"]
    originals = set(first.rows[stitched].tolist())
    assert originals == {int(row) for row, role in zip(second.rows, second.roles) if role == "original"}
    assert not originals & {int(row) for row, role in zip(first.rows, first.roles) if role == "ordinary"}
    for k, (row, donor, same) in enumerate(zip(first.rows, first.donors, first.last_same)):
        if k in stitched:  # a real row up to the split, another real row's tokens after it
            split = L + same
            assert donor != row and (first.ids[k, :split] == inputs[row, :split]).all()
            assert (first.ids[k, split:] == inputs[donor, split:]).all()
        else:
            assert donor == -1 and same == M - 1 and (first.ids[k] == inputs[row]).all()
    assert (second.ids == inputs[second.rows]).all() and (second.last_same == M - 1).all()
    assert {tuple(probes.plan_fresh(contexts, continuations, BATCH, 2, seed)[0].rows) for seed in range(4)} != {
        tuple(first.rows)
    }  # the draw follows the seed
    assert sum(role == "stitched" for role in probes.plan_fresh(contexts, continuations, BATCH, 9, 4)[0].roles) == 2


@pytest.mark.parametrize("seed", [3, 8])
def test_a_memoised_look_ahead_passes_one_process_and_fails_a_fresh_one(tiny_llama, rows, seed):
    contexts, continuations = rows
    schedule = probes.plan(contexts, continuations, BATCH, 2, seed=seed)
    fresh = probes.plan_fresh(contexts, continuations, BATCH, 2, seed=seed)
    scored, answered = probes.run(_memoised_peeking(tiny_llama), schedule, continuations, progress=False)
    assert all(c.passed for c in probes.checks(scored, answered, tolerance=1e-4))  # one process cannot see it
    _, again = probes.run(_memoised_peeking(tiny_llama), fresh, continuations, progress=False)
    check = probes.statefulness(scored, again, tolerance=0.05)
    assert not check.passed and check.evidence["max_abs_logprob_diff"] > 1
    assert check.evidence["worst"]["role"] in ("stitched", "original") and check.evidence["stitched_rows"] == 2
    honest, answered = probes.run(_honest(tiny_llama), schedule, continuations, progress=False)
    _, again = probes.run(_honest(tiny_llama), fresh, continuations, progress=False)
    assert probes.statefulness(honest, again, tolerance=1e-4).passed
