"""Stage two, judging a round from its stored evidence: the paired statistics (`stats.py`), one
axis compared (`compare.py`, with the gain and floor tests of `rules.py`), two score dumps
compared (`accuracy.py`), the forgery evidence of a speed document (`forgery.py`), one module
per gate (`gates/`), and the verdict that runs them and writes the judgement (`verdict.py`).
It reads and writes through `collector.store`; it imports nothing of `run` or `report`."""
