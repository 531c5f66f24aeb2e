# Sourced by setup_env.sh and build_image.sh: finds a CPython 3.10.
#
# find_python310 prints the path of the first interpreter that is 3.10:
# $PYTHON310, python3.10 on PATH, pyenv's 3.10 versions (whatever pyenv's
# global version is), /usr/local/bin, /usr/bin; it returns 1 if none is.

python310_works() {
  "$1" -c 'import sys; assert sys.version_info[:2] == (3, 10)' > /dev/null 2>&1
}

find_python310() {
  local candidate
  for candidate in "${PYTHON310:-}" python3.10 \
      "$(command -v pyenv > /dev/null 2>&1 && pyenv root)"/versions/3.10*/bin/python3.10 \
      "${HOME}"/.pyenv/versions/3.10*/bin/python3.10 \
      /usr/local/bin/python3.10 /usr/bin/python3.10; do
    [ -n "${candidate}" ] || continue
    if python310_works "${candidate}"; then
      command -v "${candidate}" || echo "${candidate}"
      return 0
    fi
  done
  return 1
}
