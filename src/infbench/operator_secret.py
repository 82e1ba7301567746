"""The operator's secret: what makes held-out material unpredictable to a submitter.

Everything a submission could prepare for if it knew it in advance is drawn from
seeds derived from this secret, never from a public config seed:
CompressionBench's verification contexts, sampling seed and integrity-probe
placement; ServerBench's fidelity suspects, context and EOS probes and held-out
answer questions.

Where the secret comes from (config ``operator_secret``), first found wins:

1. the environment variable named by ``operator_secret.env`` (default
   ``INFBENCH_OPERATOR_SECRET``);
2. the file named by ``operator_secret.file`` (kept outside the agent's workspace);
3. otherwise the *public demo* secret, so a fresh clone reproduces byte for byte;
   every record and table then says ``verification set: public demo``.
   ``operator_secret.require: true`` refuses to run without a real one.

Only a fingerprint (which reveals nothing) travels in rule parameters and
records, so a changed secret reruns what depends on it. The secret itself is
written only into the operator's file ``results/operator/secret.json`` (owner
read-only), by rule ``operator_secret`` once every final verification record of
the round exists (both tracks), so the operator can reproduce a result; no job
that a submission runs in, or that reads records, sees it. Rotate it for each
evaluation round.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from infbench import atomic
from infbench.config.model import SecretSettings
from infbench.errors import ConfigError

DEMO_SECRET = "infbench-public-demo-secret"


class OperatorSecret(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["public demo", "operator"]
    value: str
    fingerprint: str

    @property
    def label(self) -> str:
        """What a record or table says about the held-out material drawn from it."""
        return "public demo" if self.kind == "public demo" else f"operator secret {self.fingerprint}"

    def seed(self, purpose: str, *names: object) -> int:
        """A 63-bit seed for ``purpose`` (and ``names``) that nobody without the secret can compute."""
        message = "\0".join([purpose, *map(str, names)]).encode()
        digest = hmac.new(self.value.encode(), message, hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "little") >> 1

    def public(self) -> dict[str, str]:
        """What may be shown before the evaluation ends: kind and fingerprint, never the value."""
        return {"kind": self.kind, "fingerprint": self.fingerprint}


def _fingerprint(value: str) -> str:
    return hashlib.sha256(b"infbench-operator-secret\0" + value.encode()).hexdigest()[:16]


def _make(kind: str, value: str) -> OperatorSecret:
    return OperatorSecret(kind=kind, value=value, fingerprint=_fingerprint(value))


def load(settings: SecretSettings | dict) -> OperatorSecret:
    """The secret the config points at; errors name the config key."""
    s = settings if isinstance(settings, SecretSettings) else SecretSettings.model_validate(settings)
    value = os.environ.get(s.env, "")
    if value.strip():
        return _make("operator", value.strip())
    if s.file:
        path = Path(s.file).expanduser()
        try:
            value = path.read_text().strip()
        except OSError as exc:
            raise ConfigError("operator_secret.file", f"cannot read {path}: {exc.strerror}") from None
        if not value:
            raise ConfigError("operator_secret.file", f"{path} is empty")
        return _make("operator", value)
    if s.require:
        raise ConfigError(
            "operator_secret",
            f"no secret: set the environment variable {s.env} or "
            f"operator_secret.file (require: true refuses the public demo)",
        )
    return _make("public demo", DEMO_SECRET)


def for_job(settings: SecretSettings | dict, planned_fingerprint: str | None) -> OperatorSecret | None:
    """The secret, loaded inside a job, which must be the one the workflow was planned with (its
    ``fingerprint``, a rule parameter); None where the job draws nothing from it (no fingerprint)."""
    if not planned_fingerprint:
        return None
    secret = load(dict(settings) if isinstance(settings, dict) else settings)
    if secret.fingerprint != planned_fingerprint:
        raise ConfigError(
            "operator_secret",
            f"the secret changed since the workflow was planned (fingerprint "
            f"{secret.fingerprint}, planned {planned_fingerprint}); run it again",
        )
    return secret


def write_release(secret: OperatorSecret, records: list[str], path: str | os.PathLike) -> None:
    """The operator's copy of the secret (kind, fingerprint, value) and the final verification records drawn
    with it, readable by its owner only (mode 0600), written atomically after the round's last record."""
    body = {**secret.public(), "label": secret.label, "value": secret.value, "records": sorted(records)}
    with atomic.atomic_path(path) as tmp:
        os.chmod(tmp, 0o600)
        tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
