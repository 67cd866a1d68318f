-- Bulk replays. A job freezes its selection into items when it is planned, so messages
-- archived later are never swept in; each item ends with exactly one outcome.
CREATE TABLE replay_jobs (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    request_key        TEXT    NOT NULL UNIQUE,
    actor              TEXT    NOT NULL,
    created_at         INTEGER NOT NULL, -- Unix milliseconds
    selection          TEXT    NOT NULL, -- JSON: what was asked for (ids or list filters)
    target_exchange    TEXT,             -- a chosen target for every message; NULL: their own
    target_routing_key TEXT,
    rate_per_sec       INTEGER,          -- NULL: as fast as confirms come
    include_replayed   INTEGER NOT NULL DEFAULT 0,
    canary_count       INTEGER NOT NULL DEFAULT 0,
    canary_wait_ms     INTEGER NOT NULL DEFAULT 0,
    canary_max_deaths  INTEGER NOT NULL DEFAULT 0,
    canary_done        INTEGER NOT NULL DEFAULT 0,
    plan               TEXT    NOT NULL, -- JSON: counts per target, no target, already replayed
    -- planned, queued, running, paused, cancelled, completed
    state              TEXT    NOT NULL,
    detail             TEXT,             -- why it paused, or what the runner is waiting for
    lease_owner        TEXT,
    lease_until        INTEGER,
    started_at         INTEGER,
    finished_at        INTEGER,
    published          INTEGER NOT NULL DEFAULT 0,
    unroutable         INTEGER NOT NULL DEFAULT 0,
    nacked             INTEGER NOT NULL DEFAULT 0,
    failed             INTEGER NOT NULL DEFAULT 0,
    skipped            INTEGER NOT NULL DEFAULT 0,
    cancelled          INTEGER NOT NULL DEFAULT 0,
    total              INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX replay_jobs_state ON replay_jobs (state, id);

-- outcome: NULL (to do), sending (handed to the broker, confirm not yet recorded),
-- published, unroutable, nacked, failed, skipped, cancelled.
CREATE TABLE replay_job_items (
    job_id             INTEGER NOT NULL REFERENCES replay_jobs (id),
    message_id         INTEGER NOT NULL REFERENCES messages (id),
    target_exchange    TEXT,
    target_routing_key TEXT,
    outcome            TEXT,
    detail             TEXT,
    attempts           INTEGER NOT NULL DEFAULT 0,
    finished_at        INTEGER,
    PRIMARY KEY (job_id, message_id)
) WITHOUT ROWID;
CREATE INDEX replay_job_items_message ON replay_job_items (message_id);

-- Replays with an edited body or headers keep the edit beside the record.
ALTER TABLE replays ADD COLUMN edited_body BLOB;
ALTER TABLE replays ADD COLUMN edited_headers TEXT;

-- Why a message was dismissed.
ALTER TABLE messages ADD COLUMN status_note TEXT;

-- Every replay, job action, edit and dismissal: who, when, what. Only ever appended to.
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL, -- Unix milliseconds
    actor      TEXT    NOT NULL,
    action     TEXT    NOT NULL, -- replay, edit_replay, dismiss, job_plan, job_start, job_pause, ...
    job_id     INTEGER,
    message_id INTEGER,
    summary    TEXT    NOT NULL  -- what a person reads: selection, target, note, counts
);
CREATE INDEX audit_log_job ON audit_log (job_id);

-- The runner's next messages: only those still to do, in publishing order.
CREATE INDEX replay_job_items_todo ON replay_job_items (job_id, message_id)
    WHERE outcome IS NULL OR outcome = 'sending';
