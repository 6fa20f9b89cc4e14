"""Merge the per-GPU round databases of a device run into one file.

python data/demo/gpu/merge_rounds.py DST.duckdb SRC.duckdb [SRC.duckdb ...]
"""

from __future__ import annotations

import sys

from collector.merge import merge_rounds
from collector.store import StoreError

if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    try:
        for r in merge_rounds(sys.argv[1], sys.argv[2:]):
            print(f"merged {r}")
    except StoreError as e:
        sys.exit(f"error: {e}")
