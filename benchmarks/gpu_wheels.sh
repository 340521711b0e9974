#!/usr/bin/env bash
# Wheels the GPU machine lacks for benchmarks/gpu_suite.py (it has torch, transformers,
# triton, pyarrow, numpy, pandas, scikit-learn), downloaded here for the device tool to carry.
#
#   bash benchmarks/gpu_wheels.sh          # .whl/: polars, pydantic, pyyaml, psutil, ... and
#                                          # minkscan itself (the CLI reads its version)
#   bash benchmarks/gpu_wheels.sh ray      # .whl-ray/: Ray's wheel cut in two parts of < 60 MB
#                                          # (one call carries at most 64 MiB) + its extras
#
# On the GPU machine, one call carrying .whl:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
#   PYTHONPATH=/tmp/site python3 benchmarks/gpu_suite.py --out $OUT --parts ...
# For the pipeline part, first bring Ray (two calls within 30 s, while /tmp survives):
#   carry .whl-ray/part1:  cp .whl-ray/part1/ray.part-aa /tmp/
#   carry .whl-ray/part2:  n=$(cat .whl-ray/part2/NAME) &&
#                          cat /tmp/ray.part-aa .whl-ray/part2/ray.part-ab > /tmp/$n &&
#                          python3 -m pip install -q --no-index --no-deps --target /tmp/site
#                            /tmp/$n .whl-ray/part2/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
download() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "$@"
}
if [ "${1:-}" = ray ]; then
  rm -rf .whl-ray && mkdir -p .whl-ray/part1 .whl-ray/part2
  download -d .whl-ray/full ray==2.60.0
  download -d .whl-ray/part2 jsonschema jsonschema-specifications referencing rpds-py \
    msgpack protobuf aiohttp aiosignal frozenlist multidict yarl propcache aiohappyeyeballs \
    click filelock
  wheel=$(ls .whl-ray/full/ray-*.whl)
  basename "$wheel" > .whl-ray/part2/NAME
  split -b 60000000 "$wheel" .whl-ray/ray.part-
  mv .whl-ray/ray.part-aa .whl-ray/part1/ && mv .whl-ray/ray.part-ab .whl-ray/part2/
  rm -rf .whl-ray/full
  du -sh .whl-ray/part1 .whl-ray/part2
  exit 0
fi
rm -rf .whl && mkdir -p .whl
download -d .whl \
  polars==2.1.0 polars-runtime-32==2.1.0 pydantic==2.14.3 pydantic-core==2.50.4 \
  annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 pyyaml==6.0.3 \
  psutil
python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python  # has setuptools' wheel support
"$python" -m pip wheel -q --no-deps --no-build-isolation -w .whl .
du -sh .whl
