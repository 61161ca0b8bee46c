-- Queues: every start of a run in a queue with a rate limit is recorded, so that all workers
-- of a fleet count the same starts. Expand-only: code of schema version 5 ignores the table.
CREATE TABLE queue_starts (
    queue      TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX queue_starts_by_queue ON queue_starts (queue, started_at);

-- Wake-ups: a run that becomes claimable (a new run, a due or woken wait, a released lease, a
-- finished run freeing a queue slot) notifies idle workers, which LISTEN on 'stalwart'. The
-- payload names the schema, so fleets sharing one database wake only their own workers.
CREATE FUNCTION stalwart_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('stalwart', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_notify AFTER INSERT OR UPDATE OF status, wake_at, lease_owner ON runs
    FOR EACH ROW EXECUTE FUNCTION stalwart_notify();
