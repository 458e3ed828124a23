"""The Redis store's event-loop path (``write_async``, used by ``SessionService.run_ops_async`` for small op
lists on sessions this process holds light): optimistic writes (run, then one compare-and-set) when the
cached state is current, and otherwise ``open_async``/``save_async``: the same lock, version check,
ownership and renewal as the blocking path; against a real redis-server."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from gradserve_server import engine
from gradserve_server.app import service as app_service
from gradserve_server.app.config import Settings
from gradserve_server.app.errors import SessionBusy, SessionNotFound
from gradserve_server.app.main import create_app
from gradserve_server.app.store import make_store
from gradserve_server.app.store import redis as redis_store
from gradserve_server.app.store.redis import RedisStore
from tests.app.conftest import assert_problem, ok, run, tensor

STEP = [{"op": "mul", "out": "y", "args": ["x", 2.0]}, {"op": "sum", "out": "s", "args": ["y"]},
        {"op": "backward", "args": ["s"]}]


@pytest.fixture(autouse=True)
def no_slow_runs(monkeypatch):
    """Which path a request takes depends on how long the session's last run took (2 ms at most, else the
    thread pool); on a loaded test machine that is not a given, and these tests are about the paths."""
    monkeypatch.setattr(app_service, "INLINE_MAX_RUN_SECONDS", 10.0)


@pytest.fixture
def settings(redis_url, key_prefix) -> Settings:
    return Settings(store_url=redis_url, redis_key_prefix=key_prefix, lock_ttl_seconds=2, lock_wait_seconds=5)


def store(settings: Settings, **overrides) -> RedisStore:
    return make_store(settings.model_copy(update=overrides))


def count_async_opens(monkeypatch) -> list[int]:
    """How many times any RedisStore took the event-loop path."""
    calls = [0]
    original = RedisStore.write_async

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RedisStore, "write_async", counted)
    return calls


def record_scripts(monkeypatch) -> list[str]:
    """The scripts the event-loop path sends, by name (``_SAVE``, ``_ACQUIRE``, ...), in order."""
    names = {getattr(redis_store, n): n for n in ("_ACQUIRE", "_TOUCH", "_SAVE", "_RELEASE")}
    sent: list[str] = []
    original = redis_store._AsyncScripts.__call__

    async def recorded(self, script, keys, args, staged=None):
        sent.append(names.get(script, "?"))
        return await original(self, script, keys, args, staged)

    monkeypatch.setattr(redis_store._AsyncScripts, "__call__", recorded)
    return sent


def light_session(client, calls: list[int]) -> str:
    """A session made, given x and stepped once through ``client``: both requests on the event-loop path."""
    sid = client.post("/v1/sessions").json()["id"]
    ok(run(client, sid, [tensor("x", [1.0, 2.0])]))
    ok(run(client, sid, STEP))
    assert calls[0] == 2
    return sid


def test_small_op_lists_on_a_light_session_take_the_event_loop_path(settings, monkeypatch):
    calls = count_async_opens(monkeypatch)
    with TestClient(create_app(settings)) as client:
        sid = light_session(client, calls)
        ok(client.post(f"/v1/sessions/{sid}/ops", json={"ops": STEP, "repeat": 2}))  # repeat: thread pool
        assert calls[0] == 2
        assert client.get(f"/v1/sessions/{sid}/tensors/x.grad").json()["data"] == [6.0, 6.0]


def test_concurrent_requests_on_one_session_accumulate_exactly_across_both_paths_and_processes(settings,
                                                                                                monkeypatch):
    calls = count_async_opens(monkeypatch)
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        sid = a.post("/v1/sessions").json()["id"]
        ok(run(a, sid, [tensor("x", [1.0, 2.0])]))
        ok(run(b, sid, STEP))  # b loads it in the thread pool and holds it light from then on

        def backward(i: int) -> None:
            client = (a, b)[i % 2]
            if i % 5 == 4:  # repeated: the blocking path, on the same session at the same time
                ok(client.post(f"/v1/sessions/{sid}/ops", json={"ops": STEP, "repeat": 2}))
            else:
                ok(run(client, sid, STEP))

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(backward, range(40)))
        assert calls[0] >= 20
        passes = 1 + 32 + 2 * 8
        assert a.get(f"/v1/sessions/{sid}").json()["backward_passes"] == passes
        assert b.get(f"/v1/sessions/{sid}/tensors/x.grad").json()["data"] == [2.0 * passes] * 2


def test_concurrent_event_loop_writers_on_one_session_run_one_at_a_time(settings):
    """Many coroutines on one loop and a second store's threads: every step lands, none is lost."""
    s1, s2 = store(settings), store(settings)
    session = s1.create(engine.State())
    with s1.open(session.id, write=True) as s:
        engine.run_program(s.state, [tensor("x", [1.0, 2.0])])
        s1.save(s)

    async def step() -> None:
        async with s1.open_async(session.id) as s:
            engine.run_program(s.state, STEP)
            await asyncio.sleep(0)  # give the others a chance to collide
            await s1.save_async(s)

    def blocking_step(_: int) -> None:
        with s2.open(session.id, write=True) as s:
            engine.run_program(s.state, STEP)
            s2.save(s)

    async def main() -> None:
        with ThreadPoolExecutor(4) as pool:
            threads = asyncio.get_running_loop().run_in_executor(None, lambda: list(pool.map(blocking_step,
                                                                                           range(12))))
            await asyncio.gather(*(step() for _ in range(24)), threads)
        await s1.aclose()

    asyncio.run(main())
    with s2.open(session.id, write=False) as s:
        x = s.state.tensors["x"]
        assert x.grad_accumulations == 36
        assert x.grad.data.tolist() == [72.0, 72.0]
    s1.close()
    s2.close()


def test_an_event_loop_writer_whose_lock_lapsed_cannot_overwrite_a_newer_state(settings, redis_client,
                                                                                 key_prefix):
    first, second = store(settings), store(settings)
    session = first.create(engine.State())

    async def main() -> None:
        async with first.open_async(session.id) as slow:
            engine.run_program(slow.state, [tensor("x", 1.0)])
            redis_client.delete(f"{key_prefix}lock:{session.id}")  # its lock lapsed (a long pause, say)
            with second.open(session.id, write=True) as fast:
                engine.run_program(fast.state, [tensor("z", 5.0)])
                second.save(fast)
            with pytest.raises(SessionBusy, match="changed by another request"):
                await first.save_async(slow)
        # and one whose lock another writer holds now
        async with first.open_async(session.id) as slow:
            engine.run_program(slow.state, [tensor("w", 1.0)])
            redis_client.set(f"{key_prefix}lock:{session.id}", "another-owner")
            with pytest.raises(SessionBusy):
                await first.save_async(slow)
        redis_client.delete(f"{key_prefix}lock:{session.id}")
        await first.aclose()

    asyncio.run(main())
    for s in (first, second):
        with s.open(session.id, write=False) as now:
            assert list(now.state.tensors) == ["z"]


def test_an_event_loop_writer_waits_for_a_held_session_then_gives_409(settings, redis_client, key_prefix):
    s = store(settings, lock_wait_seconds=0.2)
    session = s.create(engine.State())
    redis_client.set(f"{key_prefix}lock:{session.id}", "someone-else", px=10_000)

    async def main() -> None:
        started = time.monotonic()
        with pytest.raises(SessionBusy, match="GRADSERVE_LOCK_WAIT_SECONDS"):
            async with s.open_async(session.id):
                pass
        assert time.monotonic() - started >= 0.2
        redis_client.delete(f"{key_prefix}lock:{session.id}")
        async with s.open_async(session.id) as now:  # free again
            await s.save_async(now)
        await s.aclose()

    asyncio.run(main())
    assert redis_client.get(f"{key_prefix}lock:{session.id}") is None


def test_event_loop_holders_locks_are_renewed(settings):
    first = store(settings, lock_ttl_seconds=0.3)
    second = store(settings, lock_ttl_seconds=0.3, lock_wait_seconds=0.1)
    session = first.create(engine.State())

    async def main() -> None:
        async with first.open_async(session.id) as slow:
            await asyncio.sleep(1.0)  # three lock TTLs
            with pytest.raises(SessionBusy):
                with second.open(session.id, write=True):
                    pass
            engine.run_program(slow.state, [tensor("x", 1.0)])
            await first.save_async(slow)
        await first.aclose()

    asyncio.run(main())
    with second.open(session.id, write=True) as now:
        assert list(now.state.tensors) == ["x"]
    first.close()
    second.close()


def test_a_failing_op_list_on_the_event_loop_path_changes_nothing_and_frees_the_session(settings, redis_client,
                                                                                         key_prefix):
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        sid = a.post("/v1/sessions").json()["id"]
        ok(run(a, sid, [tensor("x", [1.0, 2.0])]))
        assert_problem(run(a, sid, [{"op": "mul", "out": "y", "args": ["x", 2.0]}, {"op": "sum", "args": ["q"]}]),
                       404, "unknown_tensor")
        assert redis_client.get(f"{key_prefix}lock:{sid}") is None
        for client in (a, b):
            assert list(client.get(f"/v1/sessions/{sid}").json()["tensors"]) == ["x"]
        ok(run(a, sid, STEP))


def test_another_keys_request_on_the_event_loop_path_is_404_and_changes_nothing(settings, redis_client,
                                                                                 key_prefix, monkeypatch):
    calls = count_async_opens(monkeypatch)
    alice, bob = "alice-key-0123456789abcdef", "bob-key-0123456789abcdef"
    keyed = settings.model_copy(update={"api_keys": SecretStr(f"{alice},{bob}")})
    a_headers, b_headers = {"Authorization": f"Bearer {alice}"}, {"Authorization": f"Bearer {bob}"}
    with TestClient(create_app(keyed)) as client:
        sid = client.post("/v1/sessions", headers=a_headers).json()["id"]
        ok(client.post(f"/v1/sessions/{sid}/ops", json={"ops": [tensor("x", [1.0, 2.0])]}, headers=a_headers))
        before = calls[0]
        assert_problem(client.post(f"/v1/sessions/{sid}/ops", json={"ops": STEP}, headers=b_headers), 404,
                       "session_not_found")
        assert calls[0] == before + 1  # refused by the script, on the event loop path
        assert redis_client.get(f"{key_prefix}lock:{sid}") is None
        # the owner's cached state is still good, and still on the fast path
        ok(client.post(f"/v1/sessions/{sid}/ops", json={"ops": STEP}, headers=a_headers))
        assert calls[0] == before + 2
        assert client.get(f"/v1/sessions/{sid}/tensors/x.grad", headers=a_headers).json()["data"] == [2.0, 2.0]


def test_a_session_changed_by_another_process_is_reloaded_on_the_event_loop_path(settings):
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        sid = a.post("/v1/sessions").json()["id"]
        ok(run(a, sid, [tensor("x", [1.0, 2.0])]))
        ok(run(b, sid, [tensor("z", [3.0])]))  # a's cached state is now one version behind
        ok(run(a, sid, STEP))
        assert sorted(b.get(f"/v1/sessions/{sid}").json()["tensors"]) == ["s", "x", "y", "z"]


def test_a_deleted_session_is_404_on_the_event_loop_path(settings):
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        sid = a.post("/v1/sessions").json()["id"]
        ok(run(a, sid, [tensor("x", [1.0, 2.0])]))
        assert b.delete(f"/v1/sessions/{sid}").status_code == 204
        assert_problem(run(a, sid, STEP), 404, "session_not_found")
        assert sid not in a.app.state.store._cache  # the refused run's changes are not kept
        with pytest.raises(SessionNotFound):
            a.app.state.store.delete(sid)



def test_a_write_on_a_current_cached_state_is_one_round_trip_without_a_lock(settings, redis_client, key_prefix,
                                                                              monkeypatch):
    sent = record_scripts(monkeypatch)
    with TestClient(create_app(settings)) as client:
        sid = client.post("/v1/sessions").json()["id"]
        ok(run(client, sid, [tensor("x", [1.0, 2.0])]))
        version = int(redis_client.hget(f"{key_prefix}s:{sid}", "version"))
        sent.clear()
        for _ in range(3):
            ok(run(client, sid, STEP))
        assert sent == ["_SAVE"] * 3
        assert int(redis_client.hget(f"{key_prefix}s:{sid}", "version")) == version + 3
        assert redis_client.get(f"{key_prefix}lock:{sid}") is None
        assert client.get(f"/v1/sessions/{sid}/tensors/x.grad").json()["data"] == [6.0, 6.0]


def test_an_optimistic_write_never_overrides_a_lock_holder(settings, redis_client, key_prefix, monkeypatch):
    """Another process holds the lock (it is mid-request): the optimistic save is refused, the request waits
    for the lock like any writer (409 when it is not free in time), and nothing is applied twice."""
    sent = record_scripts(monkeypatch)
    quick = settings.model_copy(update={"lock_wait_seconds": 0.2})
    with TestClient(create_app(quick)) as client:
        sid = client.post("/v1/sessions").json()["id"]
        ok(run(client, sid, [tensor("x", [1.0, 2.0])]))
        redis_client.set(f"{key_prefix}lock:{sid}", "another-process", px=10_000)
        sent.clear()
        response = run(client, sid, STEP)
        assert_problem(response, 409, "session_busy")
        assert response.headers["retry-after"] == "1"
        assert sent[:2] == ["_SAVE", "_ACQUIRE"] and set(sent[2:]) == {"_ACQUIRE"}
        redis_client.delete(f"{key_prefix}lock:{sid}")
        ok(run(client, sid, STEP))  # the refused run's state was dropped: reloaded (in the thread pool)
        # after a refusal the session's writes take the lock first for a while (no wasted runs)
        sent.clear()
        ok(run(client, sid, STEP))
        assert sent == ["_ACQUIRE", "_SAVE"]
        summary = client.get(f"/v1/sessions/{sid}").json()
        assert summary["backward_passes"] == 2
        assert client.get(f"/v1/sessions/{sid}/tensors/x.grad").json()["data"] == [4.0, 4.0]


def test_an_op_list_that_fails_on_a_stale_cached_state_is_run_again_on_the_stored_one(settings, monkeypatch):
    """The cached state lacks a tensor another process made: the optimistic run's error is not reported
    (the state it ran on was stale); the request runs again under the lock on the stored state."""
    sent = record_scripts(monkeypatch)
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        sid = a.post("/v1/sessions").json()["id"]
        ok(run(a, sid, [tensor("x", [1.0, 2.0])]))
        ok(run(b, sid, [tensor("z", [3.0, 4.0])]))
        sent.clear()
        body = ok(run(a, sid, [{"op": "mul", "out": "y", "args": ["x", "z"]}]))
        assert body["tensors"]["y"]["data"] == [3.0, 8.0]
        assert sent == ["_TOUCH", "_ACQUIRE", "_SAVE"]


def test_an_op_list_that_fails_on_a_current_cached_state_reports_its_error_after_one_check(settings,
                                                                                          redis_client,
                                                                                          key_prefix,
                                                                                          monkeypatch):
    sent = record_scripts(monkeypatch)
    with TestClient(create_app(settings)) as client:
        sid = client.post("/v1/sessions").json()["id"]
        ok(run(client, sid, [tensor("x", [1.0, 2.0])]))
        version = redis_client.hget(f"{key_prefix}s:{sid}", "version")
        redis_client.pexpire(f"{key_prefix}s:{sid}", 5_000)
        sent.clear()
        assert_problem(run(client, sid, [{"op": "mul", "out": "y", "args": ["x", "q"]}]), 404, "unknown_tensor")
        assert sent == ["_TOUCH"]
        assert redis_client.hget(f"{key_prefix}s:{sid}", "version") == version
        assert redis_client.pttl(f"{key_prefix}s:{sid}") > 5_000  # the failed request renewed it
        assert list(client.get(f"/v1/sessions/{sid}").json()["tensors"]) == ["x"]


def test_writes_survive_a_redis_that_forgot_the_scripts(settings, redis_client, key_prefix):
    """A restarted or flushed Redis answers NOSCRIPT: the script is loaded and the call made again, with
    the state staged before it still in place (both paths: the event loop's and the thread pool's)."""
    with TestClient(create_app(settings)) as client:
        sid = client.post("/v1/sessions").json()["id"]
        ok(run(client, sid, [tensor("x", [1.0, 2.0])]))
        redis_client.script_flush()
        ok(run(client, sid, STEP))  # event loop, optimistic
        redis_client.script_flush()
        ok(client.post(f"/v1/sessions/{sid}/ops", json={"ops": STEP, "repeat": 2}))  # thread pool, locked
        redis_client.script_flush()
        assert client.get(f"/v1/sessions/{sid}/tensors/x.grad").json()["data"] == [6.0, 6.0]
        assert client.get(f"/v1/sessions/{sid}").json()["backward_passes"] == 3
    assert redis_client.keys(f"{key_prefix}stage:*") == []


def test_an_event_loop_exchange_that_gets_no_reply_times_out_and_its_connection_is_dropped(redis_url,
                                                                                            redis_client):
    async def main() -> None:
        scripts = redis_store._AsyncScripts(redis_url, timeout=0.3)
        assert await scripts.command("PING") == b"PONG"
        redis_client.execute_command("CLIENT", "PAUSE", 1500, "ALL")
        try:
            started = time.monotonic()
            with pytest.raises(redis_store.RedisTimeoutError, match="no reply within 0.3 s"):
                await scripts.command("PING")
            assert 0.3 <= time.monotonic() - started < 1.2
            assert scripts._free == []  # the connection cut off mid-exchange is not reused
        finally:
            redis_client.execute_command("CLIENT", "UNPAUSE")
        assert await scripts.command("PING") == b"PONG"  # a fresh connection
        await scripts.aclose()

    asyncio.run(main())


def test_at_most_a_few_optimistic_writes_are_under_way_on_one_event_loop(settings):
    """Twelve concurrent writes to twelve sessions: at most LOOP_OPTIMISTIC_WRITERS between their runs and
    their replies at any time; all twelve land."""
    s = store(settings)
    sessions = [s.create(engine.State()) for _ in range(12)]
    under_way, most = [0], [0]

    def work(session):
        under_way[0] += 1
        most[0] = max(most[0], under_way[0])
        return engine.run_program(session.state, [tensor("x", 1.0)])

    def finish(session, result):
        under_way[0] -= 1
        return session.version

    async def main() -> list[int]:
        versions = await asyncio.gather(*(s.write_async(x.id, "", work, finish) for x in sessions))
        await s.aclose()
        return versions

    assert asyncio.run(main()) == [2] * 12
    assert most[0] == redis_store.LOOP_OPTIMISTIC_WRITERS
    s.close()


def test_the_turnstile_admits_in_order_and_a_cancelled_waiter_neither_holds_nor_loses_a_place():
    async def main() -> list[str]:
        gate, order = redis_store._Turnstile(1), []
        await gate.enter()  # held

        async def visitor(name: str) -> None:
            await gate.enter()
            order.append(name)
            await asyncio.sleep(0)
            gate.leave()

        first, cancelled, last = (asyncio.create_task(visitor(n)) for n in ("first", "cancelled", "last"))
        await asyncio.sleep(0)
        cancelled.cancel()  # while waiting
        gate.leave()
        await asyncio.gather(first, last, return_exceptions=True)
        handed = asyncio.create_task(visitor("handed-then-cancelled"))
        await gate.enter()
        await asyncio.sleep(0)  # handed is waiting
        gate.leave()  # hands the place to `handed`...
        handed.cancel()  # ...which is cancelled before it runs: the place passes on, here
        await asyncio.gather(handed, return_exceptions=True)
        assert gate.idle
        return order

    assert asyncio.run(main()) == ["first", "last"]


def test_sessions_stored_in_more_than_the_event_loop_bound_are_written_in_the_thread_pool(settings, monkeypatch):
    calls = count_async_opens(monkeypatch)
    with TestClient(create_app(settings)) as client:
        sid = light_session(client, calls)
        stored = client.app.state.store._cache[sid].nbytes
        monkeypatch.setattr(redis_store, "ASYNC_SAVE_BYTES", stored - 1)
        ok(run(client, sid, STEP))  # the same small request, now in the thread pool
        assert calls[0] == 2
        monkeypatch.setattr(redis_store, "ASYNC_SAVE_BYTES", stored + 1_000)
        ok(run(client, sid, STEP))
        assert calls[0] == 3
        assert client.get(f"/v1/sessions/{sid}/tensors/x.grad").json()["data"] == [6.0, 6.0]


def test_an_optimistic_write_cancelled_while_its_save_is_in_flight_leaves_no_cached_guess(settings, redis_client):
    """Whether a save cut off in flight was applied is Redis's to say: the process drops its cached state
    and reads the stored one next time."""
    s = store(settings)
    session = s.create(engine.State())

    async def main() -> None:
        await s.write_async(session.id, "", lambda x: engine.run_program(x.state, [tensor("x", [1.0])]),
                            lambda x, r: None)
        redis_client.execute_command("CLIENT", "PAUSE", 300, "WRITE")
        try:
            task = asyncio.create_task(s.write_async(
                session.id, "", lambda x: engine.run_program(x.state, [tensor("y", [2.0])]), lambda x, r: None))
            await asyncio.sleep(0.1)  # its save is sent, and held by the pause
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert session.id not in s._cache
        finally:
            redis_client.execute_command("CLIENT", "UNPAUSE")
        names = await s.write_async(session.id, "", lambda x: engine.run_program(x.state, [tensor("z", [3.0])]),
                                    lambda x, r: sorted(x.state.tensors))
        assert names in (["x", "y", "z"], ["x", "z"])
        await s.aclose()

    asyncio.run(main())
    with s.open(session.id, write=False) as now:
        assert "z" in now.state.tensors
    s.close()
