"""One finding of `llmd doctor` or of an exit diagnosis: what was seen, the setting to change."""

from __future__ import annotations

import dataclasses
from typing import Literal

Severity = Literal["ok", "info", "warning", "error"]
SEVERITY_RANK = {"ok": 0, "info": 1, "warning": 2, "error": 3}


@dataclasses.dataclass(frozen=True)
class Finding:
    """`check` names what was looked at (architecture, tokenizer, memory, versions, cpu, model,
    or an exit cause such as oom); `severity` ok | info | warning | error; `message` one line of
    what was seen; `hint` one line naming the setting to change (empty for ok); `evidence` the
    log line or figure it rests on, if any."""

    check: str
    severity: Severity
    message: str
    hint: str = ""
    evidence: str = ""

    def to_dict(self) -> dict[str, str]:
        """The finding as JSON (`llmd doctor --json`, the status snapshot)."""
        return dataclasses.asdict(self)


def worst(findings: tuple[Finding, ...] | list[Finding]) -> Severity:
    """The most severe of `findings` ('ok' for none)."""
    return max((f.severity for f in findings), key=SEVERITY_RANK.__getitem__, default="ok")
