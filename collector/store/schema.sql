-- sparkboard's one store. Schema version 5 (collector/store/db.py: SCHEMA_VERSION, MIGRATIONS).
--
-- History: 1 -> 2 added table score_dumps, sessions.attempts, comparisons.n_main/n_pr, and the
-- session status 'incomplete' (a concurrent width that lost tokens). 2 -> 3 added sessions.seed
-- and the session statuses 'forged' and 'diverged' (collector/forgery.py, collector/sandbox.py).
-- 3 -> 4 added rounds.shards and sessions.shard, gpu_index, gpu_uuid, host (a round cut into
-- shards, one per GPU, each PR judged against the main sessions of its own shard:
-- collector/cluster.py). 4 -> 5: paired sessions (main's engine timed beside the PR's, turn by
-- turn): samples carry both engines' values of a PR session (primary key with `side`),
-- sessions.canary_before_s / canary_after_s (the box's own speed around a session) and
-- rounds.sandbox (what sealed the PR's code: 'bubblewrap 0.8.0', or 'none' for --unsandboxed).
-- An older database is migrated on open; a newer or unknown one is refused.
--
-- The collector writes every table; the verdict engine writes comparisons, gates and
-- verdicts; the site generator only reads. Strings a PR author controls (title, author,
-- labels, branch, log tails) are stored exactly as given and escaped where they are shown.
-- Axis names: 'decode@128', 'prefill@4096', 'concurrent@8' (see collector/axes.py).

CREATE TABLE IF NOT EXISTS schema_meta (
    key   VARCHAR PRIMARY KEY,           -- 'version'
    value VARCHAR NOT NULL
);

-- One measuring round: one main commit, one box, one policy.
CREATE TABLE IF NOT EXISTS rounds (
    round_id      VARCHAR PRIMARY KEY,   -- from the manifest, e.g. '2026-11-30-gpu'
    created_at    TIMESTAMP NOT NULL,
    finished_at   TIMESTAMP,             -- NULL while the round is incomplete
    engine_repo   VARCHAR NOT NULL,
    base_ref      VARCHAR NOT NULL,
    main_commit   VARCHAR NOT NULL,      -- the exact commit every PR is merged onto
    profile       VARCHAR NOT NULL,      -- 'cpu' | 'gpu'
    policy_json   JSON NOT NULL,         -- the policy in force, resolved for the profile
    device_name   VARCHAR,               -- e.g. 'NVIDIA H200' or the CPU model
    driver        VARCHAR,
    manifest_toml VARCHAR NOT NULL,      -- the manifest as read, for reproduction
    shards        INTEGER,               -- how many shards (GPUs) the round was cut into; NULL: one
    sandbox       VARCHAR                -- what sealed every checkout's code ('bubblewrap 0.8.0'), or
                                         -- 'none' (collect --unsandboxed); NULL: a round before sandboxes
);

-- A PR as seen in one round (titles and labels change between rounds).
CREATE TABLE IF NOT EXISTS prs (
    round_id   VARCHAR NOT NULL,
    pr         INTEGER NOT NULL,
    title      VARCHAR NOT NULL,
    author     VARCHAR NOT NULL,
    labels     VARCHAR[] NOT NULL,
    targets    VARCHAR[] NOT NULL,       -- model names the PR claims to speed up
    source     VARCHAR NOT NULL,         -- 'ref:<git ref>' or 'patch:<path>'
    branch     VARCHAR,
    expect     VARCHAR,                  -- the verdict a demo PR should get, if stated
    PRIMARY KEY (round_id, pr)
);

-- The PR tip merged onto the round's main commit; what was actually built and measured.
CREATE TABLE IF NOT EXISTS candidates (
    round_id      VARCHAR NOT NULL,
    pr            INTEGER NOT NULL,
    pr_commit     VARCHAR,               -- the PR tip (for a patch: the commit made from it)
    main_commit   VARCHAR NOT NULL,
    merged_commit VARCHAR,               -- the merge result measured; NULL if it did not merge
    status        VARCHAR NOT NULL,      -- 'ready' | 'needs-rebase' | 'harness-touched' | 'error'
    detail        VARCHAR,               -- conflicting or harness files, or the error
    PRIMARY KEY (round_id, pr)
);

-- One harness subprocess run. side 'main' sessions have pr = 0.
CREATE TABLE IF NOT EXISTS sessions (
    session_id   VARCHAR PRIMARY KEY,    -- '<round>/<side>/<pr>/<slot>/<kind>/<model>', or with
                                         -- several shards '<round>/s<shard>/<side>/<pr>/<slot>/…'
    round_id     VARCHAR NOT NULL,
    side         VARCHAR NOT NULL,       -- 'main' | 'pr'
    pr           INTEGER NOT NULL,
    slot         INTEGER NOT NULL,       -- position in the interleaved schedule
    kind         VARCHAR NOT NULL,       -- 'sweep' | 'concurrent' | 'score' | 'prefill-check' | 'guard'
    model        VARCHAR NOT NULL,
    commit       VARCHAR NOT NULL,       -- the commit the subprocess ran
    started_at   TIMESTAMP NOT NULL,
    wall_s       DOUBLE NOT NULL,
    exit_code    INTEGER,                -- NULL when killed on timeout
    status       VARCHAR NOT NULL,       -- 'ok' | 'crash' | 'timeout' | 'malformed' | 'incomplete' | 'implausible' | 'forged' | 'diverged' | 'infra'
    fault        VARCHAR NOT NULL,       -- 'none' | 'pr' | 'infra'
    detail       VARCHAR,                -- why the status, in plain words
    log_tail     VARCHAR,                -- last lines of stderr, untrusted
    device_name  VARCHAR,
    driver       VARCHAR,
    vram_free_after_load BIGINT,
    vram_peak    BIGINT,
    kv_cache_bytes BIGINT,
    document     JSON,                   -- the parsed document (score positions dropped: see score_dumps)
    attempts     INTEGER,                -- subprocess runs it took (retries of infrastructure failures)
    seed         BIGINT,                 -- a speed session's challenge seed (its prompts derive from it)
    shard        INTEGER DEFAULT 0,      -- the shard (one GPU's PRs and their own main sessions)
    gpu_index    INTEGER,                -- the GPU it ran on (CUDA_VISIBLE_DEVICES), NULL: none known
    gpu_uuid     VARCHAR,                -- that GPU's UUID where nvidia-smi gives one
    host         VARCHAR,                -- the machine it ran on
    canary_before_s DOUBLE,              -- a fixed workload timed right before the session's
    canary_after_s  DOUBLE               -- engines started and right after they ended (speed sessions)
);

-- Raw measurements: one row per repetition (or per complete concurrent run) of each engine. A
-- PR's speed session timed main's engine beside the PR's: its rows of side 'main' and 'pr' with
-- the same rep are a pair, measured turn by turn in the same minutes (pr: the session's PR).
CREATE TABLE IF NOT EXISTS samples (
    session_id VARCHAR NOT NULL,
    round_id   VARCHAR NOT NULL,
    side       VARCHAR NOT NULL,         -- whose engine: 'main' | 'pr'
    pr         INTEGER NOT NULL,         -- the session's PR; 0 in main's own sessions
    model      VARCHAR NOT NULL,
    axis       VARCHAR NOT NULL,         -- 'decode@128' | 'prefill@512' | 'concurrent@8' | memory
    rep        INTEGER NOT NULL,
    value      DOUBLE NOT NULL,          -- tokens/s (memory axes: bytes)
    PRIMARY KEY (session_id, side, axis, rep)
);

-- Teacher-forced accuracy of a PR's model against main's, over the evaluation corpus.
CREATE TABLE IF NOT EXISTS accuracy (
    round_id   VARCHAR NOT NULL,
    pr         INTEGER NOT NULL,         -- 0: main against main (calibration)
    model      VARCHAR NOT NULL,
    n_tokens   INTEGER NOT NULL,
    top1       DOUBLE NOT NULL,          -- argmax agreement
    kl         DOUBLE NOT NULL,          -- mean KL(main || PR) over the top-k union
    ppl_main   DOUBLE NOT NULL,
    ppl_pr     DOUBLE NOT NULL,
    PRIMARY KEY (round_id, pr, model)
);

-- A score session's full teacher-forced dump (tokens, per-position argmax, target
-- log-prob and top-k), kept so accuracy can be recomputed between any two dumps.
CREATE TABLE IF NOT EXISTS score_dumps (
    session_id  VARCHAR PRIMARY KEY,
    round_id    VARCHAR NOT NULL,
    side        VARCHAR NOT NULL,
    pr          INTEGER NOT NULL,
    model       VARCHAR NOT NULL,
    n_positions INTEGER NOT NULL,
    document    JSON NOT NULL            -- the ScoreResult as parsed
);

-- Batched prefill against the token loop, inside one build, per side and prefix.
CREATE TABLE IF NOT EXISTS prefill_checks (
    session_id VARCHAR NOT NULL,
    round_id   VARCHAR NOT NULL,
    side       VARCHAR NOT NULL,
    pr         INTEGER NOT NULL,
    model      VARCHAR NOT NULL,
    prefix     INTEGER NOT NULL,
    top1       DOUBLE NOT NULL,
    kl_mean    DOUBLE NOT NULL,
    kl_max     DOUBLE NOT NULL,
    PRIMARY KEY (session_id, prefix)
);

-- Per-axis comparison, PR against main, for target and guard models.
CREATE TABLE IF NOT EXISTS comparisons (
    round_id    VARCHAR NOT NULL,
    pr          INTEGER NOT NULL,
    model       VARCHAR NOT NULL,
    role        VARCHAR NOT NULL,        -- 'target' | 'guard'
    axis        VARCHAR NOT NULL,
    main_value  DOUBLE NOT NULL,         -- median tok/s (main's engine beside the PR's, v5)
    pr_value    DOUBLE NOT NULL,
    delta       DOUBLE NOT NULL,         -- median of the paired ratios PR / main - 1 (v5)
    ci_low      DOUBLE NOT NULL,         -- bootstrap 95% interval of delta (within sessions)
    ci_high     DOUBLE NOT NULL,
    noise       DOUBLE NOT NULL,         -- the noise whose band spans sessions_z standard errors of
                                         -- the PR's mean session (collector/README.md, "Verdict
                                         -- rules"); earlier collectors: the spread between the
                                         -- PR's sessions, or main-vs-main spread of the round
    tier        VARCHAR NOT NULL,        -- 'none' | 'XS' | ... | 'XL'
    significant BOOLEAN NOT NULL,        -- clears both the tier gate and the noise
    below_floor BOOLEAN NOT NULL,        -- under the regression floor (98% of main)
    implausible BOOLEAN NOT NULL,        -- a gain beyond the implausible-gain guard
    n_main      INTEGER,                 -- raw samples behind main_value
    n_pr        INTEGER,                 -- raw samples behind pr_value
    PRIMARY KEY (round_id, pr, model, axis)
);

-- Every gate of a PR's verdict, with its reason in plain words.
CREATE TABLE IF NOT EXISTS gates (
    round_id VARCHAR NOT NULL,
    pr       INTEGER NOT NULL,
    gate     VARCHAR NOT NULL,           -- 'floor', 'accuracy:<model>', 'prefill-path:<model>', 'guard:<model>', 'run:<model>'
    status   VARCHAR NOT NULL,           -- 'pass' | 'fail' | 'warn' | 'skip'
    reason   VARCHAR NOT NULL,
    PRIMARY KEY (round_id, pr, gate)
);

CREATE TABLE IF NOT EXISTS verdicts (
    round_id    VARCHAR NOT NULL,
    pr          INTEGER NOT NULL,
    commit      VARCHAR,                 -- the PR commit the verdict holds for
    label       VARCHAR NOT NULL,        -- 'XL'..'XS' | 'none' | 'REJECT' | 'needs-rebase' | 'harness-touched' | 'pending'
    best_model  VARCHAR,
    best_axis   VARCHAR,
    best_delta  DOUBLE,
    ci_low      DOUBLE,
    ci_high     DOUBLE,
    reason      VARCHAR NOT NULL,
    merge_first BOOLEAN NOT NULL,
    decided_at  TIMESTAMP NOT NULL,
    PRIMARY KEY (round_id, pr)
);

-- A possibly-flaky PR failure; a REJECT for it needs two rounds at the same commit.
CREATE TABLE IF NOT EXISTS strikes (
    pr          INTEGER NOT NULL,
    commit      VARCHAR NOT NULL,
    failure_key VARCHAR NOT NULL,        -- e.g. 'crash:concurrent:llama-1b'
    round_id    VARCHAR NOT NULL,
    detail      VARCHAR,
    PRIMARY KEY (pr, commit, failure_key, round_id)
);
