"""Secrets masked for display and in every log record: by option name (token,
password, ...) and by value pattern (AccountKey=, bearer tokens, URL passwords)."""

import logging
import re
import sys
import traceback
from typing import Any, Mapping

__all__ = ['MASK', 'is_secret_name', 'masked', 'masked_arg', 'secret_names',
           'mask_text', 'masked_exception', 'mask_logs']

MASK = '***'
_SECRET_WORDS = frozenset(
    ('secret', 'secrets', 'token', 'tokens', 'password', 'passwd', 'pwd',
     'credential', 'credentials', 'apikey', 'passphrase'))
# `key` alone names a label or a prediction; after these words, a secret.
_KEY_OWNERS = frozenset(('api', 'access', 'private', 'secret', 'auth',
                         'signing', 'encryption', 'client', 'account',
                         'service', 'ssh'))


def is_secret_name(name: str) -> bool:
  """True for names that say secret/token/password/(api/private...) key."""
  spaced = re.sub(r'([a-z0-9])([A-Z])', r'\1 \2', str(name))
  words = [w.lower() for w in re.split(r'[^A-Za-z0-9]+', spaced) if w]
  if any(word in _SECRET_WORDS for word in words):
    return True
  return any(word in ('key', 'keys') and i and words[i - 1] in _KEY_OWNERS
             for i, word in enumerate(words))


def masked(config: Mapping[str, Any]) -> dict:
  """`config` with the values of secret-named entries (nested too) masked."""
  result = {}
  for name, value in config.items():
    if is_secret_name(name):
      result[name] = MASK
    elif isinstance(value, Mapping):
      result[name] = masked(value)
    else:
      result[name] = value
  return result


def masked_arg(arg: Any) -> Any:
  """`--NAME=VALUE` with VALUE masked when NAME names a secret, or the
  secrets inside VALUE masked (`--azure_connection_string=...AccountKey=*`)."""
  if isinstance(arg, str) and arg.startswith('-') and '=' in arg:
    name, value = arg.split('=', 1)
    if is_secret_name(name):
      return f'{name}={MASK}'
    return f'{name}={mask_text(value)}'
  return arg


def secret_names(config: Mapping[str, Any], prefix: str = '') -> list:
  """Dotted names of the secret-named entries of `config`, nested too."""
  names = []
  for name, value in config.items():
    dotted = f'{prefix}{name}'
    if is_secret_name(name):
      names.append(dotted)
    elif isinstance(value, Mapping):
      names.extend(secret_names(value, f'{dotted}.'))
  return names


# `name=value`, `name: value`, `"name": "value"` (also with escaped quotes,
# as in a repr or a proto's text): the name is tested by is_secret_name.
_ASSIGNMENT = re.compile(
    r'(?P<name>[A-Za-z][A-Za-z0-9_-]*)(?P<close>\\?["\']?)'
    r'(?P<sep>\s*[=:]\s*)'
    r'(?:(?P<escaped>\\")(?P<v_escaped>(?:(?!\\").)*)\\"|'
    r'(?P<double>")(?P<v_double>[^"]*)"|'
    r"(?P<single>')(?P<v_single>[^']*)'|"
    r'(?P<v_bare>[^\s"\',;&)}\]]+))')
_BEARER = re.compile(r'(?P<scheme>\b(?:[Bb]earer|BEARER)\s+)[A-Za-z0-9._~+/=-]+')
_URL_PASSWORD = re.compile(
    r'(?P<head>\b[a-z][a-z0-9+.-]*://[^:/\s@"\']+:)[^@/\s"\']+(?=@)')


def _masked_assignment(match: 're.Match') -> str:
  """The value masked if the name is a secret's, else the value's secrets."""
  quote = (match.group('escaped') or match.group('double') or
           match.group('single') or '')
  value = next(match.group(group) for group in
               ('v_escaped', 'v_double', 'v_single', 'v_bare')
               if match.group(group) is not None)
  shown = MASK if is_secret_name(match.group('name')) else mask_text(value)
  return (match.group('name') + match.group('close') + match.group('sep') +
          quote + shown + quote)


def mask_text(text: str) -> str:
  """`text` with every secret it shows masked.

  By name: the value of `name=value`, `name: value` or `"name": "value"`
  when the name says secret, token, password, an account or access key
  (`is_secret_name`: `--s3_secret_access_key=...`, `AccountKey=...` in a
  connection string, `"api_token": "..."` in a custom_config's JSON). By
  value: bearer tokens (`Bearer <token>`) and a URL's password
  (`scheme://user:<password>@host`).

  Args:
    text: any text (a log line, an error message, a command line).

  Returns:
    The text, each secret value replaced by `MASK`.
  """
  if not isinstance(text, str) or not text:
    return text
  text = _ASSIGNMENT.sub(_masked_assignment, text)
  text = _BEARER.sub(lambda m: m.group('scheme') + MASK, text)
  return _URL_PASSWORD.sub(lambda m: m.group('head') + MASK, text)


def masked_exception(error: BaseException) -> str:
  """The traceback of `error`, as `traceback.print_exc` shows it, masked."""
  return mask_text(''.join(traceback.format_exception(
      type(error), error, error.__traceback__)))


def _masked_arg_value(value: Any) -> Any:
  """A log record's argument, as its masked text if it shows a secret."""
  if isinstance(value, (int, float, bool)) or value is None:
    return value
  try:
    text = value if isinstance(value, str) else str(value)
  except Exception:  # pylint: disable=broad-except
    return value  # Formatting will show what it can; nothing to mask here.
  masked_text = mask_text(text)
  return value if masked_text == text else masked_text


def _mask_record(record: logging.LogRecord) -> None:
  """Masks the secrets of a record's message, arguments and traceback."""
  if isinstance(record.msg, str):
    record.msg = mask_text(record.msg)
  if isinstance(record.args, Mapping):
    record.args = {k: _masked_arg_value(v) for k, v in record.args.items()}
  elif record.args:
    record.args = tuple(_masked_arg_value(v) for v in record.args)
  if record.exc_info and record.exc_info[1] is not None:
    record.exc_text = masked_exception(record.exc_info[1]).rstrip('\n')


class _MaskingRecordFactory:
  """The process's LogRecord factory, every record's secrets masked."""

  def __init__(self, factory):
    self.factory = factory

  def __call__(self, *args, **kwargs) -> logging.LogRecord:
    record = self.factory(*args, **kwargs)
    _mask_record(record)
    return record


def _masked_excepthook(error_type, error, error_traceback) -> None:
  del error_type, error_traceback  # In `error`.
  sys.stderr.write(masked_exception(error))


def mask_logs(uncaught: bool = False) -> None:
  """Masks secrets in every log record this process makes from now on.

  Installs a LogRecord factory (`logging.setLogRecordFactory`) that masks
  each record as a logger makes it: absl's (TFX logs through it), Beam's,
  TensorFlow's, a module's own, whatever handler later writes it (a
  handler's filter would miss the handlers added after it). Idempotent;
  the factory it finds is kept underneath.

  Args:
    uncaught: also print an exception that ends the process masked (for a
      process this project starts: the CLI, a KFP step; not a user's).
  """
  factory = logging.getLogRecordFactory()
  if not isinstance(factory, _MaskingRecordFactory):
    logging.setLogRecordFactory(_MaskingRecordFactory(factory))
  if uncaught:
    sys.excepthook = _masked_excepthook
