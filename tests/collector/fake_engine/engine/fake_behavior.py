"""What the fake engine does. PRs in the tests change this file (it is not a harness path)."""

SPEED: dict[str, float] = {}  # '<model>/<phase>' (phase: decode, prefill, concurrent) -> factor
FAIL: dict[str, str] = {}  # command ('sweep', 'concurrent', 'score', 'prefill-check') -> behaviour
ACCURACY_BROKEN: bool = False
PREFILL_KL: float = 0.001
