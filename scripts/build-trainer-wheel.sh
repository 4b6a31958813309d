#!/usr/bin/env bash
# Build the trainer package's wheel reproducibly (same sources -> byte-identical wheel), so the trainer role
# can ship it and reinstall only when the sources changed. Usage: build-trainer-wheel.sh SOURCE_DIR OUT_DIR
# Prints the wheel's path.
set -euo pipefail
src=$(cd "${1:?source dir}" && pwd)
out=${2:?output dir}
python=${PYTHON:-$src/.venv/bin/python}
[ -x "$python" ] || python=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$src" --exclude=__pycache__ --exclude='*.pyc' -cf - pyproject.toml trainer | tar -C "$work" -xf -
mkdir -p "$out"
rm -f "$out"/testbed_trainer-*.whl
SOURCE_DATE_EPOCH=315532800 "$python" -m pip wheel --quiet --no-deps --no-build-isolation \
  --wheel-dir "$out" "$work" >&2
ls "$out"/testbed_trainer-*.whl
