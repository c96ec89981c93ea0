-- The claim takes the first queued job in its order (resumed jobs first, then by
-- `run_after`, then id). The index it had (`run_after` alone) let it filter but not
-- order, so every claim read and sorted the whole backlog: 6 ms a claim with 3,000
-- jobs queued, most of the queue's database time (bench/README.md, "queue.sh"). In
-- this order the claim reads the index from its start and stops at the first job
-- it can lock.
DROP INDEX refine_jobs_claimable;
CREATE INDEX refine_jobs_claim_order ON refine_jobs ((started_at IS NULL), run_after, id)
    WHERE status = 'queued';
