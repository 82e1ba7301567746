"""The config's own checks that its types and bounds cannot express (names that refer to other keys, seeds
that must not overlap, ranges), run as validators of the models in :mod:`infbench.config.model`; each raises a
:class:`ConfigError` naming the key to fix.

They read the config only: checks that look at the machine (the llama.cpp converter's file, installed
distributions, GPUs) or reach into a track's modules (launch specs, question pools, task names) are
:mod:`infbench.preflight`'s, run by the workflow after the config is typed. So this package imports no track.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from infbench.errors import ConfigError

if TYPE_CHECKING:
    from infbench.config.model import Config, ServingCore


def config(cfg: Config) -> None:
    """The references between sections: each task's and the serving section's source is configured."""
    known = cfg.sources
    for i, task in enumerate(cfg.tasks):
        if task.source not in known:
            raise ConfigError(
                f"tasks[{i}].source", f"unknown source '{task.source}' (sources: {', '.join(sorted(known))})"
            )
    if cfg.serving is not None and cfg.serving.source not in known:
        raise ConfigError("serving.source", f"unknown source '{cfg.serving.source}'")


def serving(section: ServingCore) -> None:
    """The serving section: known servers, disjoint seeds (launch specs are rendered by
    :func:`infbench.preflight.serving_specs`)."""
    known = section.servers
    ref = section.calibration.reference
    if ref not in known:
        raise ConfigError("serving.calibration.reference", f"unknown server '{ref}' (servers: {', '.join(known)})")
    for i, engine in enumerate(section.calibration.baselines):
        if engine not in known or engine == ref:
            why = "the reference itself" if engine == ref else f"unknown server (servers: {', '.join(known)})"
            raise ConfigError(f"serving.calibration.baselines[{i}]", f"'{engine}': {why}")
    for i, system in enumerate(section.systems):
        if system.server not in known:
            raise ConfigError(f"serving.systems[{i}].server", f"unknown server '{system.server}'")
    seeds = section.seeds
    disjoint_seeds(
        {
            "development": seeds.development,
            "final": seeds.final,
            "calibration": seeds.calibration,
            "coverage": section.coverage.seed_list,
        }
    )


def disjoint_seeds(seed_sets: Mapping[str, tuple[int, ...] | list[int]]) -> None:
    """Development, final, calibration and coverage seeds must never overlap."""
    names = sorted(seed_sets)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            common = set(seed_sets[a]) & set(seed_sets[b])
            if common:
                raise ConfigError(f"serving.seeds.{b}", f"shares seeds {sorted(common)[:5]} with {a}")


def token_id_range(value: tuple[int, int]) -> tuple[int, int]:
    """``serving.workload.token_id_range`` is a non-empty ``[low, high)``."""
    low, high = value
    if not low < high:
        raise ConfigError("serving.workload.token_id_range", f"empty range [{low}, {high})")
    return value


def start_ratio(value: tuple[float, float]) -> tuple[float, float]:
    """``serving.replay.start_ratio`` is a range ``[first, last]``."""
    first, last = value
    if first > last:
        raise ConfigError("serving.replay.start_ratio", f"[{first}, {last}] is not a range (first > last)")
    return value
