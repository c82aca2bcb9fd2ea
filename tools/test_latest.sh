#!/usr/bin/env bash
# make test-latest: the suite's JAX tests on the newest JAX the declared range allows, in .venv-latest,
# with the newest Python on this machine that JAX supports (pyenv's 3.13, then 3.12, then
# python3.13 / python3.12 on PATH). Where there is none it says so in one line and passes.
#
#   LATEST_PYTHONS="3.13 3.12"   the Python versions to try, newest first
#   LATEST_VENV=.venv-latest     where the environment lives (git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LATEST_VENV:-.venv-latest}
CANDIDATES=${LATEST_PYTHONS:-"3.13 3.12"}

# Every interpreter that may do, best first: pyenv's newest patch release of each version,
# then the one on PATH (a pyenv shim for a version that is not installed fails `-c pass`).
candidates() {
  local root=""
  command -v pyenv >/dev/null 2>&1 && root=$(pyenv root 2>/dev/null || true)
  for v in $CANDIDATES; do
    if [ -n "$root" ]; then
      { ls -d "$root"/versions/"$v".* 2>/dev/null || true; } | { grep -E "/$v\.[0-9]+$" || true; } |
        sort -rV | while read -r d; do [ ! -x "$d/bin/python" ] || echo "$d/bin/python"; done
    fi
    command -v "python$v" 2>/dev/null || true
  done
}

usable() {  # runs, has venv and is one of the wanted versions
  "$1" -c 'import sys, venv; sys.exit(0 if "%d.%d" % sys.version_info[:2] in sys.argv[1].split() else 1)' \
    "$CANDIDATES" >/dev/null 2>&1
}

install() {  # $1: interpreter. A fresh venv when it was made by another Python.
  local want have
  want=$("$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
  have=$([ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c \
    'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || true)
  if [ "$want" != "$have" ]; then
    rm -rf "$VENV"
    "$1" -m venv "$VENV" || return 1
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip || return 1
  # jax and jaxlib named: upgraded to the newest release the package's range allows; then
  # compiled to bytecode on every core (tools/compile_site.py says why)
  "$VENV/bin/python" -m pip install -q --no-compile --upgrade -e ".[dev]" jax jaxlib || return 1
  "$VENV/bin/python" tools/compile_site.py || return 1
}

chosen=""
for py in $(candidates); do
  usable "$py" || continue
  echo "test-latest: $("$py" --version) ($py)"
  if install "$py"; then
    chosen=$py
    break
  fi
  echo "test-latest: the newest JAX does not install on $py; trying the next Python"
  rm -rf "$VENV"
done
if [ -z "$chosen" ]; then
  echo "test-latest: skipped: no Python ${CANDIDATES// / or } here that the newest JAX installs on (make test covers JAX $(sed -n 's/^JAX_MIN = "\(.*\)"/\1/p' autograder/core/versions.py))"
  exit 0
fi

export PATH="$PWD/$VENV/bin:$PATH"
export JAX_NUM_CPU_DEVICES=${JAX_NUM_CPU_DEVICES:-8} TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-3}
"$VENV/bin/python" -c 'import jax, jaxlib, sys; print(f"test-latest: JAX {jax.__version__}, jaxlib {jaxlib.__version__}, Python {sys.version.split()[0]}")'
"$VENV/bin/lint-imports" || exit 1
# Every test that exercises JAX, once more on the newest JAX, as make test runs the suite
# (tools/run_suite.py: the serial ones alone, then the rest in parallel); the orchestration tests
# (processes, files, records, reports, gradebooks, packaging: marked in their modules) are the
# same on any JAX and run in make test only. `tools/test_latest.sh --select ""` runs them here too.
exec "$VENV/bin/python" tools/run_suite.py --select "not orchestration" "$@"
