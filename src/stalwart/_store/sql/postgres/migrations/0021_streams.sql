-- Durable streams: what a run emits (stalwart.emit), an append-only table keyed by the run, the
-- stream and the chunk's offset (0, 1, 2, ... per run and stream, given at insert as the
-- stream's last offset plus one under the run's row lock, so offsets are gap-free in commit
-- order). seq and attempt name the step attempt that emitted it (NULL seq: workflow code).
-- origin names the emit itself (a step attempt's own counter, or workflow code's journal
-- position), unique per run, so a batch retried after a lost acknowledgement, or workflow code
-- replayed, writes nothing again. at is when it was emitted (epoch seconds). Readers that
-- follow a stream LISTEN on 'stalwart': one notification per statement that inserts chunks
-- (PostgreSQL folds the same notification within a transaction into one), its payload the
-- schema and '/stream', which idle workers (woken by the schema alone) ignore. Expand-only:
-- older code ignores the table, and its listeners the payload.
CREATE TABLE stream_chunks (
    workflow_id TEXT NOT NULL,
    stream      TEXT NOT NULL,
    "offset"    BIGINT NOT NULL,
    seq         BIGINT,
    attempt     INTEGER NOT NULL,
    origin      TEXT NOT NULL,
    data        BYTEA NOT NULL,
    at          DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (workflow_id, stream, "offset")
);
CREATE UNIQUE INDEX stream_chunks_origin ON stream_chunks (workflow_id, origin);
CREATE FUNCTION stalwart_notify_stream() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('stalwart', TG_TABLE_SCHEMA || '/stream');
    RETURN NULL;
END
$$;
CREATE TRIGGER stream_chunks_notify AFTER INSERT ON stream_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION stalwart_notify_stream();
