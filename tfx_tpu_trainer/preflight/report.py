"""The findings of a TPU preflight and their report (text or JSON)."""

import dataclasses
import json
from typing import Any, Dict, List, Optional, Tuple

from tfx_tpu_trainer import errors

ERROR = 'error'
WARNING = 'warning'
INFO = 'info'
SEVERITIES = (ERROR, WARNING, INFO)


class PreflightError(errors.TPUTrainerError, ValueError):
  """The model is not TPU-ready; the message lists what to change."""


@dataclasses.dataclass(frozen=True)
class Finding:
  """One result of a preflight check, as data; its text is rendered last.

  Attributes:
    code: a stable identifier of the check (e.g. 'float64', see
      docs/guide/your_model.md, "What each finding means").
    severity: 'error' (TPU training would fail), 'warning' (it may fail or
      be slow, or a check was not exact), 'info'.
    cause: what is wrong (after `where`, when that is set).
    phase: 'config', 'input', 'train', 'eval' or 'export'.
    fix: what to do ('' when the cause says it).
    op: the name of the graph op the finding is about, if any: findings
      are folded under their cause and merged across steps by it.
    where: the op, feature, tensor or key the finding names, as the message
      names it ('' when the cause names it).
    knock_on: findings folded under this one (`code at 'op'`).
    also_in: later steps in which the same finding was made.
    error: the error the finding reports, as raised (`Type: message`), when
      it is the same in every step that raises it (a model_fn that fails
      the same way in train, eval and export): findings with the same code
      and error are one root cause, reported once (`merge_repeated`).
  """
  code: str
  severity: str
  cause: str
  phase: str
  fix: str = ''
  op: Optional[str] = None
  where: str = ''
  knock_on: Tuple[str, ...] = ()
  also_in: Tuple[str, ...] = ()
  error: str = ''

  @property
  def message(self) -> str:
    """What is wrong, where, what to do; then what was folded or merged."""
    text = ' '.join(part for part in (self.where, self.cause, self.fix)
                    if part)
    if self.knock_on:
      text += (' (Knock-on findings of this cause, folded here: '
               f'{", ".join(self.knock_on)}.)')
    if self.also_in:
      text += (f' (Also in the {" and ".join(self.also_in)} '
               f'step{"s" if len(self.also_in) > 1 else ""}.)')
    return text

  def line(self) -> str:
    severity = self.severity.upper()
    return f'{severity:7} [{self.phase}/{self.code}] {self.message}'

  def to_dict(self) -> Dict[str, Any]:
    """The finding for JSON: its fields and the rendered message."""
    return dict(code=self.code, severity=self.severity, message=self.message,
                phase=self.phase, op=self.op, where=self.where,
                cause=self.cause, fix=self.fix, knock_on=list(self.knock_on),
                also_in=list(self.also_in), error=self.error)


def merge_repeated(findings: List[Finding]) -> List[Finding]:
  """One finding per root cause: later steps are named in the first one.

  Findings with the same code that name the same op (`op` and `where` set;
  a finding about the step as a whole, e.g. 'xla-compile', has no `where`),
  or that report the same `error`, are one finding; the later ones' phases
  go into the first one's `also_in`. So an error raised in every step (a
  Keras model's DenseFeatures over categorical columns fails train, eval
  and export alike) is printed once, not once a step.
  """
  first: Dict[Tuple[str, str, str], int] = {}
  merged = []
  for finding in findings:
    if finding.op and finding.where:
      key = (finding.code, 'op', finding.op)
    elif finding.error:
      key = (finding.code, 'error', finding.error)
    else:
      key = None
    if key is None:
      merged.append(finding)
    elif key in first:
      index = first[key]
      if finding.phase not in (merged[index].phase,) + merged[index].also_in:
        merged[index] = dataclasses.replace(
            merged[index], also_in=merged[index].also_in + (finding.phase,))
    else:
      first[key] = len(merged)
      merged.append(finding)
  return merged


@dataclasses.dataclass
class PreflightReport:
  """All findings of a preflight, with what it checked and how long it took."""
  source: str
  num_shards: int
  sample_origin: str
  findings: List[Finding] = dataclasses.field(default_factory=list)
  seconds: Dict[str, float] = dataclasses.field(default_factory=dict)

  @property
  def errors(self) -> List[Finding]:
    return [f for f in self.findings if f.severity == ERROR]

  @property
  def warnings(self) -> List[Finding]:
    return [f for f in self.findings if f.severity == WARNING]

  @property
  def ok(self) -> bool:
    """True when no check found an error: the model is TPU-ready."""
    return not self.errors

  def format(self) -> str:
    """A human-readable report, errors first."""
    verdict = ('TPU-ready' if self.ok else
               f'NOT TPU-ready: {len(self.errors)} error(s)')
    lines = [
        f'TPU preflight of {self.source}: {verdict}',
        f'  shards: {self.num_shards}; sample: {self.sample_origin}',
        '  phases: ' + ', '.join(f'{phase} {seconds:.1f}s'
                                 for phase, seconds in self.seconds.items()),
    ]
    order = {severity: index for index, severity in enumerate(SEVERITIES)}
    for finding in sorted(self.findings, key=lambda f: order[f.severity]):
      lines.append('  ' + finding.line())
    return '\n'.join(lines)

  def to_json(self) -> str:
    return json.dumps(
        {
            'source': self.source,
            'ok': self.ok,
            'num_shards': self.num_shards,
            'sample': self.sample_origin,
            'seconds': self.seconds,
            'findings': [f.to_dict() for f in self.findings],
        },
        indent=2)

  def raise_if_not_ready(self, headline: Optional[str] = None) -> None:
    """Raises PreflightError listing the errors, if any.

    Args:
      headline: what precedes the errors (default: the TPU preflight's).
    """
    if self.ok:
      return
    headline = headline or (
        f'{self.source} is not TPU-ready ({len(self.errors)} error(s) found '
        'by the TPU preflight):')
    raise PreflightError(
        headline + '\n' +
        '\n'.join('  ' + finding.line() for finding in self.errors))
