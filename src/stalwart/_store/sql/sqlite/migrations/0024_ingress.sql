-- Ingress (docs/ingress.md): one row per subscription or webhook that a worker of some app
-- served, with the fleet-wide counts of the messages it accepted (a run started or an event
-- delivered) and rejected (a body that does not fit). kind names the source ("rabbitmq",
-- "nats", "redis", "webhook"), target what a message does ("starts agent", "event 'paid'").
-- Workers add to the counts (an upsert per message); nothing else reads them but the listings.
-- Expand-only: older code ignores the table.
CREATE TABLE ingress_sources (
    name        TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    target      TEXT NOT NULL,
    accepted    INTEGER NOT NULL DEFAULT 0,
    rejected    INTEGER NOT NULL DEFAULT 0,
    updated_at  REAL NOT NULL
);
