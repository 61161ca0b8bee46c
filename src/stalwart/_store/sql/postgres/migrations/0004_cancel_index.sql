-- Workers poll for cancel requests on the runs they hold: index only those rows.
CREATE INDEX runs_cancel_requested ON runs (lease_owner)
    WHERE cancel_requested = 1 AND status = 'running';
