"""Values of options named as secrets (token, password, ...) masked for display."""

import re
from typing import Any, Mapping

__all__ = ['MASK', 'is_secret_name', 'masked', 'masked_arg', 'secret_names']

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
  """`--NAME=VALUE` with VALUE masked when NAME names a secret."""
  if isinstance(arg, str) and arg.startswith('-') and '=' in arg:
    name, _ = arg.split('=', 1)
    if is_secret_name(name):
      return f'{name}={MASK}'
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
