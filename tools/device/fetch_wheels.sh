#!/usr/bin/env bash
# Fill the git-ignored .whl/ folder with what tools/device/h200_run.sh needs on the bare GPU image
# (Python 3.12 there): test tools as wheels, GemLite as its pure-Python source.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl/wheels .whl/gemlite_src
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d .whl/wheels pytest pluggy iniconfig packaging hypothesis sortedcontainers attrs pytest-timeout
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --no-binary=:all: -d "$tmp" gemlite==0.6.0.post2
tar xzf "$tmp"/gemlite-*.tar.gz -C "$tmp"
rm -rf .whl/gemlite_src/gemlite && cp -r "$tmp"/gemlite-*/gemlite .whl/gemlite_src/
