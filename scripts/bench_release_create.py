"""`llmd release create` on a model with large weights: the first release (every file hashed)
against the next ones (digests from the cache), over several rounds, as a table.

The model is the tiny model's tokenizer and config beside a weights file of random bytes of the
given size, written once into a temporary directory. Each round uses a fresh state directory:
its first create hashes everything, its second reads no file (the figure that matters for a
15 GB model). The weights stay in the page cache after they are written, so the first create
measures hashing, not the disk.

Usage: python scripts/bench_release_create.py [--gib 2] [--rounds 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from llmd.config import EngineConfig
from llmd.releases.store import ReleaseStore, create_release

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="weights size in GiB (2)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    parser.add_argument("--dir", type=Path, help="where to write the model (default: a temp dir)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llmd-bench-release-", dir=args.dir))
    try:
        model = work / "model"
        shutil.copytree(REPO / "var" / "models" / "tiny", model)
        (model / "model.safetensors").unlink()
        with (model / "model-00001-of-00001.safetensors").open("wb") as handle:
            for _ in range(int(args.gib * 1024)):
                handle.write(os.urandom(1 << 20))
        engine = EngineConfig(model=str(model), served_model_name="bench")
        first, again = [], []
        for round_ in range(args.rounds):
            store = ReleaseStore(work / f"state{round_}")
            for name, times in (("first", first), ("again", again)):
                began = time.perf_counter()
                _, cache = create_release(store, name, "main", engine, None)
                times.append(time.perf_counter() - began)
                print(
                    f"round {round_ + 1} {name}: {times[-1]:.3f} s, "
                    f"{cache.bytes_hashed / 2**30:.2f} GiB hashed",
                    file=sys.stderr,
                )
    finally:
        shutil.rmtree(work)
    print(f"release create, {args.gib:g} GiB of weights, {args.rounds} rounds (seconds)")
    print("| create | median | min | max |")
    print("|---|---|---|---|")
    for label, times in (("first (hash every file)", first), ("next (digest cache)", again)):
        print(f"| {label} | {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
