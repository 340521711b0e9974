#!/usr/bin/env bash
# Wheels the GPU machine lacks for benchmarks/gpu_suite.py (it has torch, transformers,
# triton, pyarrow, numpy), downloaded here into .whl/ (git-ignored) for the device tool to
# carry. On the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
#   PYTHONPATH=/tmp/site:pipeline python3 benchmarks/gpu_suite.py --out $OUT
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl \
  polars==2.1.0 polars-runtime-32==2.1.0 pydantic==2.14.3 pydantic-core==2.50.4 \
  annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 pyyaml==6.0.3
du -sh .whl
