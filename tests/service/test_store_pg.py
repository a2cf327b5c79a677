"""The PostgreSQL job store (dnnprov.service.store.postgres) on a real PostgreSQL server, store by store.

Each :class:`PgJobStore` here is one replica's view of one fresh database; the replicas'
HTTP servers are tested in test_store_pg_replicas.py. The leases last 1 s and no lease
beat runs (nothing calls ``attach``), so a store that stops being used is a replica that
died: its leases expire on the database's clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is in the test extra")

from pg_server import LocalPostgres, missing

from dnnprov.errors import InvalidInputError
from dnnprov.service.store import Job, open_store
from dnnprov.service.store.postgres import PgJobStore

BODY = {"instance": "embedded:spot/paper-table1.json"}


def job(store: PgJobStore, job_id: str) -> Job:
    """The stored job, which must exist."""
    found = store.get(job_id)
    assert found is not None, job_id
    return found


@pytest.fixture(scope="module")
def pg() -> Iterator[LocalPostgres]:
    """One PostgreSQL server for the module (skipped without the binaries)."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    server = LocalPostgres()
    yield server
    server.stop()


@pytest.fixture
def url(pg: LocalPostgres) -> str:
    """A fresh database, leases of 1 s."""
    return pg.new_database() + "?lease_s=1"


def test_open_store_picks_postgres_for_a_url(url: str, tmp_path) -> None:
    """`--db postgresql://...` opens the PostgreSQL store, a path the SQLite one; the log shows no password."""
    store = open_store(url)
    assert isinstance(store, PgJobStore) and store.lease_s == 1.0 and store.ping()
    store.close()
    assert type(open_store(tmp_path / "jobs.sqlite")).__name__ == "JobStore"
    with_password = open_store(url.replace("postgres@", "postgres:secret@"))  # trust: the password is not checked
    assert "secret" not in str(with_password.path) and ":***@" in str(with_password.path)
    with_password.close()


def test_bad_urls_are_one_error_on_db() -> None:
    """An unreachable server and a bad lease are refused naming --db."""
    with pytest.raises(InvalidInputError) as info:
        PgJobStore("postgresql://postgres@127.0.0.1:1/nope")
    assert info.value.field == "--db" and "cannot use" in info.value.problem
    with pytest.raises(InvalidInputError) as info:
        PgJobStore("postgresql://postgres@127.0.0.1:1/nope?lease_s=0")
    assert info.value.field == "--db" and "lease_s" in info.value.problem


def test_idempotency_keys_and_tenants_hold_across_replicas(url: str) -> None:
    """A key used on one replica is the same job on another; another body is refused; tenants are apart."""
    a, b = PgJobStore(url), PgJobStore(url)
    job_id, created = a.add("solve", BODY, tenant="t1", idempotency_key="k")
    assert created
    assert b.add("solve", BODY, tenant="t1", idempotency_key="k") == (job_id, False)
    with pytest.raises(InvalidInputError) as info:
        b.add("solve", {**BODY, "gap": 0.1}, tenant="t1", idempotency_key="k")
    assert info.value.field == "Idempotency-Key"
    # a replay answered without a place (the server full): the key's job, looked up on any replica
    assert b.replayed("solve", BODY, tenant="t1", idempotency_key="k") == job_id
    assert b.replayed("solve", BODY, tenant="t2", idempotency_key="k") is None
    with pytest.raises(InvalidInputError):
        b.replayed("solve", {**BODY, "gap": 0.1}, tenant="t1", idempotency_key="k")
    other, created = b.add("solve", BODY, tenant="t2", idempotency_key="k")
    assert created and other != job_id
    assert b.get(job_id, "t2") is None and b.get(job_id, "t1") is not None
    assert b.cancel(job_id, "t2") is None and job(a, job_id).status == "queued"
    assert [j.id for j in b.list(tenant="t2")] == [other]
    assert b.cancel(job_id, "t1") == "queued" and job(a, job_id).status == "cancelled"
    assert a.delete(job_id, "t2") is False and a.delete(job_id, "t1") is True and b.get(job_id) is None
    # the same key sent at once to two replicas from 8 clients: one job
    answers: list[tuple[str, bool]] = []
    threads = [
        threading.Thread(target=lambda s=s: answers.append(s.add("solve", BODY, tenant="t1", idempotency_key="race")))
        for s in (a, b) * 4
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({i for i, _ in answers}) == 1 and sum(c for _, c in answers) == 1
    a.close()
    b.close()


def test_only_the_current_attempt_writes_the_result(url: str) -> None:
    """A replica that lost its lease writes nothing; the adopting replica runs attempt 2 and its end counts."""
    a, b = PgJobStore(url), PgJobStore(url)
    job_id, _ = a.add("solve", BODY)
    assert not b.start(job_id)  # not b's job
    assert a.start(job_id) and job(a, job_id).status == "running"
    assert b.recover() == []  # the lease holds
    time.sleep(1.3)  # a "dies": no renewal
    adopted = b.recover()
    assert [(j.id, j.status, j.attempts) for j in adopted] == [(job_id, "queued", 1)]
    assert not a.start(job_id)
    assert b.start(job_id)
    assert not a.finish(job_id, "done", result={"by": "a"})
    assert not a.requeue(job_id, refund=True)
    assert b.finish(job_id, "done", result={"by": "b"})
    ended = job(a, job_id)
    assert (ended.status, ended.result, ended.attempts, ended.body) == ("done", {"by": "b"}, 2, None)
    assert not b.finish(job_id, "failed", error={"field": "", "message": "again"})
    a.close()
    b.close()


def test_claims_of_orphans_are_disjoint(url: str) -> None:
    """Three replicas adopting 60 orphaned jobs at once (FOR UPDATE SKIP LOCKED): each job to exactly one."""
    dead = PgJobStore(url)
    ids = [dead.add("solve", {**BODY, "n": i})[0] for i in range(60)]
    for job_id in ids[:10]:
        assert dead.start(job_id)  # ten were running when it died
    time.sleep(1.3)  # every lease expired
    replicas = [PgJobStore(url) for _ in range(3)]
    assert replicas[0].recover() == []  # a new replica trusts expired leases only after a whole lease connected
    time.sleep(1.1)
    got: dict[int, list[str]] = {}
    barrier = threading.Barrier(3)

    def adopt(i: int) -> None:
        barrier.wait()
        got[i] = [job.id for job in replicas[i].recover()]

    threads = [threading.Thread(target=adopt, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = [job_id for jobs in got.values() for job_id in jobs]
    assert sorted(claimed) == sorted(ids)  # all adopted, none twice
    counts = replicas[0].counts()
    assert counts["queued"] == 60 and counts["running"] == 0
    attempts = {job.id: job.attempts for job in replicas[0].list(limit=100)}
    assert all(attempts[i] == 1 for i in ids[:10]) and all(attempts[i] == 0 for i in ids[10:])
    for i, jobs in got.items():  # each starts exactly its own
        assert all(replicas[i].start(job_id) for job_id in jobs)
        assert not any(replicas[(i + 1) % 3].start(job_id) for job_id in jobs)
    for store in (dead, *replicas):
        store.close()


def test_a_stopping_replica_hands_its_queue_over(url: str) -> None:
    """close() (a graceful stop) leaves its queued jobs to the others at once, without waiting for the lease."""
    a, b = PgJobStore(url), PgJobStore(url)
    job_id, _ = a.add("solve", BODY)
    other, _ = a.add("solve", BODY)
    assert a.start(other) and a.requeue(other, refund=True)  # drained: attempt not counted, left to anyone
    a.close()
    adopted = b.recover()
    assert sorted(j.id for j in adopted) == sorted([job_id, other]) and all(j.attempts == 0 for j in adopted)
    b.close()


def test_an_outage_longer_than_a_lease_does_not_let_a_replica_take_live_jobs(pg: LocalPostgres) -> None:
    """A replica whose adoption try is retried across a database outage must not trust the leases the
    outage expired: it judges trust at each try, and the failed tries restart its clock."""
    url = pg.new_database()
    owner = PgJobStore(url + "?lease_s=3")  # alive all along; its lease runs out during the outage
    job_id, _ = owner.add("solve", BODY)
    assert owner.start(job_id)
    other = PgJobStore(url + "?lease_s=1", retry_s=60)
    time.sleep(1.1)  # connected for a whole lease: trusts expired leases from now on
    restart = threading.Thread(target=pg.restart, kwargs={"down_s": 3.5})
    restart.start()
    while pg.process.poll() is None:  # down before the adoption try begins
        time.sleep(0.05)
    adopted = other.recover()  # retried until the database is back, after the owner's lease expired
    restart.join()
    assert adopted == []
    running = job(other, job_id)
    held_by = other._run(lambda db: db.execute("SELECT owner FROM dnnprov_jobs WHERE id = %s", (job_id,)).fetchone())
    assert (running.status, running.attempts, held_by) == ("running", 1, (owner.replica,))
    owner.close()
    other.close()


def test_a_start_or_end_whose_answer_was_lost_is_not_counted_twice(url: str) -> None:
    """The commit of a start (or of an end) happened but its answer was lost with the connection:
    asking again claims the same attempt (and finds the same end), not a second one."""
    store = PgJobStore(url)
    job_id, _ = store.add("solve", BODY)
    store._run(  # what a start committed just as the connection broke leaves
        lambda db: db.execute("UPDATE dnnprov_jobs SET status = 'running', attempts = 1 WHERE id = %s", (job_id,))
    )
    assert store.start(job_id)
    assert job(store, job_id).attempts == 1
    store._run(  # what an end committed just as the connection broke leaves (the attempt still claimed here)
        lambda db: db.execute("UPDATE dnnprov_jobs SET status = 'done', finished = 0 WHERE id = %s", (job_id,))
    )
    assert store.finish(job_id, "done", result={"x": 1})
    ended = job(store, job_id)
    assert (ended.status, ended.attempts, ended.result) == ("done", 1, {"x": 1})
    other, _ = store.add("solve", BODY)
    assert store.start(other) and not store.start(other)  # a start heard back is not repeated
    assert job(store, other).attempts == 1
    store.close()
