"""`score_texts` on repeated calls: the first call's seconds (model load, start-up probes)
against the second's (the kept scorer), side by side in one process, and after
`release_scorers` (the model loaded again).

    .venv/bin/python benchmarks/bench_score_texts.py

Measured on the bundled SmolLM2-135M (CPU), three short texts per call.
"""

from __future__ import annotations

import time

TEXTS = ["Some text to test.", "", "Another one, a little longer than the first."]


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    from minkscan import release_scorers, score_texts

    first = timed(lambda: score_texts(TEXTS))
    second = timed(lambda: score_texts(TEXTS))
    release_scorers()
    released = timed(lambda: score_texts(TEXTS))
    print(f"first call:                   {first:.2f} s")
    print(f"second call (kept scorer):    {second:.2f} s  ({first / second:.0f}x faster)")
    print(f"after release_scorers():      {released:.2f} s")


if __name__ == "__main__":
    main()
