#!/usr/bin/env bash
# Creates or refreshes .venv: Python 3.10, the pinned lock file, this package.
#
# Idempotent and quick when nothing changed: the hash of requirements.lock,
# setup.py and this script is stamped into the venv, and a matching stamp
# skips the install.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${repo_root}/.venv"
stamp="${venv}/.tfx-tpu-trainer-installed"
tools="${repo_root}/.tools"

log() { echo "[setup] $*" >&2; }

# shellcheck source=python310.sh
source "${repo_root}/scripts/python310.sh"

find_uv() {
  if command -v uv >/dev/null 2>&1; then command -v uv; return 0; fi
  if [ -x "${tools}/uv/bin/uv" ]; then echo "${tools}/uv/bin/uv"; return 0; fi
  log "uv not found; installing it into ${tools}/uv (from PyPI)"
  # As root (a container, CI), pip would warn about root and virtual
  # environments: the target folder is this checkout's own.
  PIP_ROOT_USER_ACTION=ignore "$1" -m pip install --quiet \
      --disable-pip-version-check --target "${tools}/uv" uv >&2
  echo "${tools}/uv/bin/uv"
}

fingerprint() {
  cat "${repo_root}/requirements.lock" "${repo_root}/setup.py" \
      "${repo_root}/scripts/setup_env.sh" \
    | sha256sum | cut -d' ' -f1
}

main() {
  if ! python310="$(find_python310)"; then
    cat >&2 <<'MSG'
[setup] error: Python 3.10 was not found (TFX 1.15.1 needs Python >=3.9,<3.11).
[setup] Install it, then run this command again, e.g.:
[setup]   pyenv install 3.10 && pyenv local 3.10      (pyenv)
[setup]   apt-get install python3.10 python3.10-venv    (Debian/Ubuntu)
[setup] or point PYTHON310 at an interpreter: PYTHON310=/path/to/python3.10
MSG
    exit 1
  fi

  if [ -f "${stamp}" ] && [ "$(cat "${stamp}")" = "$(fingerprint)" ] \
      && [ -x "${venv}/bin/python" ]; then
    exit 0
  fi

  uv="$(find_uv "${python310}")"
  if [ ! -x "${venv}/bin/python" ]; then
    log "creating ${venv} with ${python310}"
    "${uv}" venv --quiet --seed --python "${python310}" "${venv}"
  fi
  log "installing the locked dependencies (first run: ~2 min, ~3 GB)"
  # Compiled to bytecode at install (as pip does): Python does not write .pyc
  # files where PYTHONDONTWRITEBYTECODE is set, and every process would then
  # compile TensorFlow and TFX again (importing them: 30 s instead of 12 s).
  "${uv}" pip install --quiet --compile-bytecode --python "${venv}/bin/python" \
      -r "${repo_root}/requirements.lock"
  "${uv}" pip install --quiet --python "${venv}/bin/python" --no-deps -e "${repo_root}"
  fingerprint > "${stamp}"
  log "environment ready: ${venv}"
}

# Sourced (tests), it defines the functions alone.
if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
  main "$@"
fi
