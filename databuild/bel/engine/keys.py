"""The keys write transactions lock: one per want, job run, partition, pool and backfill a command
decides about (a backend may also find them in SQL, from these same prefixes)."""


def want_key(want_id: str) -> str:
    return f"want:{want_id}"


def run_key(job_run_id: str) -> str:
    return f"run:{job_run_id}"


def ref_key(ref: str) -> str:
    return f"ref:{ref}"


def pool_key(pool: str) -> str:
    return f"pool:{pool}"


def backfill_key(backfill_id: str) -> str:
    return f"backfill:{backfill_id}"
