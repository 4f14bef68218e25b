#!/usr/bin/env bash
# Lock each image's requirements (requirements/*.in -> requirements/*.txt) with uv, for the Python of the
# images (3.11 on Linux), with every artefact's hash so the images install with --require-hashes.
# An existing lock is the starting point: only what an .in file no longer admits changes; pass --upgrade
# to move every pin to the newest release. --check locks into a scratch copy and fails if it differs.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v uv >/dev/null 2>&1 || { echo "tools/lock_requirements.sh needs uv on PATH (pip install uv)." >&2; exit 2; }

check=false
extra=()
for arg in "$@"; do
  case "$arg" in
    --check) check=true ;;
    --upgrade) extra+=(--upgrade) ;;
    *) echo "tools/lock_requirements.sh: unknown argument '$arg'; accepted: --check, --upgrade." >&2; exit 2 ;;
  esac
done

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
status=0
for input in requirements/*.in; do
  lock="${input%.in}.txt"
  target="$lock"
  if $check; then
    target="$scratch/$(basename "$lock")"
    cp "$lock" "$target"
  fi
  uv pip compile --quiet "${extra[@]}" --python-version 3.11 --python-platform linux --generate-hashes \
    --annotation-style line --custom-compile-command "tools/lock_requirements.sh" "$input" -o "$target"
  if $check && ! diff -u "$lock" "$target"; then
    echo "$lock is not the lock of $input: run tools/lock_requirements.sh and commit the result." >&2
    status=1
  fi
done
exit "$status"
