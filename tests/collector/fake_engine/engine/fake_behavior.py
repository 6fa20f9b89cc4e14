"""What the fake engine does. PRs in the tests change this file (it is not a harness path)."""

# '<model>/<phase>' (phase: decode, prefill, concurrent; longctx: its prefill alone) -> factor
SPEED: dict[str, float] = {}
FAIL: dict[str, str] = {}  # command ('sweep', 'concurrent', 'score', 'prefill-check') -> behaviour
ACCURACY_BROKEN: bool = False
PREFILL_KL: float = 0.001
FORGE_CLOCK: float = 1.0  # the engine process's own clock reads this share of the real time
WRONG_WORK: bool = False  # the timed runs' outputs disagree with main's model
MEMORY: dict[str, int] = {}  # model -> bytes kept resident beyond the base (FAKE_ENGINE_MEMORY)
WRONG_BATCHED: set[str] = set()  # models whose multi-sequence decode is wrong (not single)
# A burst of load on the box that hit only this checkout's first runs of a command ('sweep',
# 'longctx') of each model, SLOW_RUNS[command] of them: each runs at BURST of its speed (the
# count is kept in a file beside this one).
SLOW_RUNS: dict[str, int] = {}
BURST: float = 1.0
IDLE_CPU: float = 0.0  # CPU seconds its processes use after each answer (works while not its turn)
