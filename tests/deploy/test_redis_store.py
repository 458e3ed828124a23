"""The Redis session store against a real redis-server: state round trips, TTL, the lock and the version
check, listing and limits across store instances (each instance stands for a process)."""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from gradserve_server import engine
from gradserve_server.app.config import Settings
from gradserve_server.app.errors import SessionBusy, SessionNotFound, StoreUnavailable, TooManySessions
from gradserve_server.app.main import create_app
from gradserve_server.app.store import make_store
from gradserve_server.app.store.redis import RedisStore
from tests.app.conftest import assert_problem, ok, run, tensor
from tests.deploy.servers import free_port


@pytest.fixture
def settings(redis_url, key_prefix) -> Settings:
    return Settings(store_url=redis_url, redis_key_prefix=key_prefix, lock_ttl_seconds=2, lock_wait_seconds=5)


@pytest.fixture
def clients(settings):
    """Two apps over the one Redis: what two processes behind a load balancer see."""
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        yield a, b


def store(settings: Settings, **overrides) -> RedisStore:
    return make_store(settings.model_copy(update=overrides))


def program(state, ops):
    return engine.run_program(state, ops)


LINEAR = [tensor("x", [1.0, 2.0]), tensor("w", [3.0, 4.0]), {"op": "mul", "out": "y", "args": ["w", "x"]},
          {"op": "sum", "out": "s", "args": ["y"]}]


def test_redis_url_selects_the_redis_store_and_memory_stays_the_default(settings):
    assert isinstance(make_store(settings), RedisStore)
    assert type(make_store(Settings())).__name__ == "MemoryStore"


def test_a_graph_built_through_one_app_runs_backward_through_the_other(clients):
    a, b = clients
    sid = a.post("/v1/sessions").json()["id"]
    ok(run(a, sid, LINEAR))
    ok(b.post(f"/v1/sessions/{sid}/backward", json={"tensor": "s"}))
    assert a.get(f"/v1/sessions/{sid}/tensors/x.grad").json()["data"] == [3.0, 4.0]
    assert b.get(f"/v1/sessions/{sid}/tensors/w.grad").json()["data"] == [1.0, 2.0]


def test_freed_graphs_saved_versions_retain_grad_and_accumulations_survive_the_store(clients):
    a, b = clients
    sid = a.post("/v1/sessions").json()["id"]
    ok(run(a, sid, [tensor("a", [1.0, 2.0]), {"op": "mul", "out": "h", "args": ["a", 2.0]},
                    {"op": "retain_grad", "args": ["h"]}, {"op": "pow", "out": "q", "args": ["h", 2]},
                    {"op": "sum", "out": "s", "args": ["q"]}, {"op": "backward", "args": ["s"]}]))
    # the saved values were freed by the backward in a: a second one through b fails as torch does
    assert_problem(b.post(f"/v1/sessions/{sid}/backward", json={"tensor": "s"}), 409, "graph_freed")
    assert b.get(f"/v1/sessions/{sid}/tensors/h.grad").json()["data"] == [4.0, 8.0]
    # the version counter shared by views survives too: modify a saved tensor in place through b ...
    ok(run(b, sid, [tensor("c", [1.0, 2.0]), {"op": "mul", "out": "d", "args": ["c", 1.0]},
                    {"op": "pow", "out": "e", "args": ["d", 2]}, {"op": "sum", "out": "t", "args": ["e"]},
                    {"op": "mul_", "args": ["d", 2.0]}]))
    # ... and the backward through a sees the mismatch
    assert_problem(a.post(f"/v1/sessions/{sid}/backward", json={"tensor": "t"}), 409, "version_mismatch")
    ok(run(a, sid, [{"op": "mul", "out": "y", "args": ["a", 3.0]}, {"op": "sum", "out": "z", "args": ["y"]},
                    {"op": "backward", "args": ["z"]}]))
    a_view = b.get(f"/v1/sessions/{sid}/tensors/a").json()
    assert a_view["grad"] == [11.0, 19.0] and a_view["grad_accumulations"] == 2


def test_the_stored_state_is_the_engines_serialisation_json_and_raw_buffers(settings, redis_client, key_prefix):
    s = store(settings)
    session = s.create(engine.State())
    with s.open(session.id, write=True) as opened:
        program(opened.state, LINEAR)
        s.save(opened)
    blob = redis_client.get(f"{key_prefix}state:{session.id}")
    assert blob == engine.dumps(opened.state)
    assert blob[:4] == b"GSV1"
    (hlen,) = struct.unpack("<Q", blob[4:12])
    header = json.loads(blob[12:12 + hlen])
    assert set(header["names"]) == {"x", "w", "y", "s"}
    meta = redis_client.hgetall(f"{key_prefix}s:{session.id}")
    assert meta[b"version"] == b"2" and meta[b"tensor_count"] == b"4" and b"state" not in meta
    # the state's key expires with the session's; the staged copy was renamed into place, not left behind
    assert abs(redis_client.pttl(f"{key_prefix}state:{session.id}")
               - redis_client.pttl(f"{key_prefix}s:{session.id}")) < 1000
    assert redis_client.keys(f"{key_prefix}stage:*") == []


def test_sessions_expire_with_redis_and_every_access_renews_them(clients, settings, redis_client, key_prefix):
    a, b = clients
    sid = a.post("/v1/sessions").json()["id"]
    keys = [f"{key_prefix}s:{sid}", f"{key_prefix}state:{sid}"]
    ttl_ms = settings.session_ttl_seconds * 1000
    for key in keys:
        assert ttl_ms - 5000 < redis_client.pttl(key) <= ttl_ms
        redis_client.pexpire(key, 5000)
    ok(b.get(f"/v1/sessions/{sid}"))  # a read renews
    for key in keys:
        assert redis_client.pttl(key) > ttl_ms - 5000
        redis_client.pexpire(key, 5000)
    ok(run(a, sid, [tensor("x", 1.0)]))  # and so does a write
    for key in keys:
        assert redis_client.pttl(key) > ttl_ms - 5000
        redis_client.pexpire(key, 1)
    time.sleep(0.05)
    assert_problem(b.get(f"/v1/sessions/{sid}"), 404, "session_not_found")
    assert sid not in [s["id"] for s in a.get("/v1/sessions").json()["sessions"]]


def test_listing_counting_and_the_session_limit_span_processes(settings):
    a_app, b_app = create_app(settings.model_copy(update={"max_sessions": 3})), \
        create_app(settings.model_copy(update={"max_sessions": 3}))
    with TestClient(a_app) as a, TestClient(b_app) as b:
        ids = [a.post("/v1/sessions").json()["id"], b.post("/v1/sessions").json()["id"],
               a.post("/v1/sessions").json()["id"]]
        response = b.post("/v1/sessions")
        assert_problem(response, 429, "too_many_sessions")
        assert response.headers["Retry-After"]
        assert sorted(s["id"] for s in b.get("/v1/sessions").json()["sessions"]) == sorted(ids)
        assert a.get("/readyz").json()["sessions"] == 3
        ok(run(b, ids[0], [tensor("x", 1.0), tensor("y", 2.0)]))
        listed = {s["id"]: s["tensor_count"] for s in a.get("/v1/sessions").json()["sessions"]}
        assert listed[ids[0]] == 2
        assert b.delete(f"/v1/sessions/{ids[1]}").status_code == 204
        assert_problem(a.get(f"/v1/sessions/{ids[1]}"), 404, "session_not_found")
        assert_problem(a.delete(f"/v1/sessions/{ids[1]}"), 404, "session_not_found")
        assert b.get("/readyz").json()["sessions"] == 2
        assert a.post("/v1/sessions").status_code == 201


def test_a_session_held_by_another_process_gives_409_session_busy_with_retry_after(settings, redis_client,
                                                                                     key_prefix):
    app = create_app(settings.model_copy(update={"lock_wait_seconds": 0.2}))
    with TestClient(app) as client:
        sid = client.post("/v1/sessions").json()["id"]
        ok(run(client, sid, [tensor("x", 1.0)]))
        redis_client.set(f"{key_prefix}lock:{sid}", "someone-else", px=10_000)
        started = time.monotonic()
        response = run(client, sid, [{"op": "mul", "out": "y", "args": ["x", 2.0]}])
        assert time.monotonic() - started >= 0.2
        body = assert_problem(response, 409, "session_busy")
        assert "GRADSERVE_LOCK_WAIT_SECONDS" in body["detail"]
        assert int(response.headers["Retry-After"]) >= 1
        ok(client.get(f"/v1/sessions/{sid}/tensors/x"))  # readers take no lock
        redis_client.delete(f"{key_prefix}lock:{sid}")
        assert "y" not in client.get(f"/v1/sessions/{sid}").json()["tensors"]
        ok(run(client, sid, [{"op": "mul", "out": "y", "args": ["x", 2.0]}]))


def test_a_writer_whose_lock_expired_cannot_overwrite_a_newer_state(settings, redis_client, key_prefix):
    first, second = store(settings), store(settings)
    session = first.create(engine.State())
    with first.open(session.id, write=True) as slow:
        program(slow.state, [tensor("x", 1.0)])
        redis_client.delete(f"{key_prefix}lock:{session.id}")  # its lock lapsed (a long pause, say)
        with second.open(session.id, write=True) as fast:
            program(fast.state, [tensor("z", 5.0)])
            second.save(fast)
        with pytest.raises(SessionBusy, match="changed by another request"):
            first.save(slow)
    for s in (first, second):
        with s.open(session.id, write=False) as now:
            assert list(now.state.tensors) == ["z"]
    assert redis_client.keys(f"{key_prefix}stage:*") == []  # the refused save's staged state was dropped


def test_a_lapsed_lock_taken_by_another_writer_refuses_the_first_writers_save(settings, redis_client, key_prefix):
    first, second = store(settings), store(settings)
    session = first.create(engine.State())
    with first.open(session.id, write=True) as slow:
        program(slow.state, [tensor("x", 1.0)])
        redis_client.set(f"{key_prefix}lock:{session.id}", "another-owner")
        with pytest.raises(SessionBusy):
            first.save(slow)
    redis_client.delete(f"{key_prefix}lock:{session.id}")
    with second.open(session.id, write=False) as now:
        assert now.state.tensors == {}


def test_locks_are_renewed_while_a_slow_request_holds_them(settings):
    first = store(settings, lock_ttl_seconds=0.3)
    second = store(settings, lock_ttl_seconds=0.3, lock_wait_seconds=0.1)
    session = first.create(engine.State())
    with first.open(session.id, write=True) as slow:
        time.sleep(1.0)  # three lock TTLs
        with pytest.raises(SessionBusy):
            with second.open(session.id, write=True):
                pass
        program(slow.state, [tensor("x", 1.0)])
        first.save(slow)
    with second.open(session.id, write=True) as now:
        assert list(now.state.tensors) == ["x"]
    first.close()
    second.close()


def test_a_failing_op_list_leaves_the_stored_and_the_cached_state_as_they_were(clients):
    a, b = clients
    sid = a.post("/v1/sessions").json()["id"]
    ok(run(a, sid, [tensor("x", [1.0, 2.0])]))
    assert_problem(run(a, sid, [{"op": "mul", "out": "y", "args": ["x", 2.0]}, {"op": "nope", "args": []}]),
                   422)
    for client in (a, b):
        assert list(client.get(f"/v1/sessions/{sid}").json()["tensors"]) == ["x"]


def test_writes_from_two_stores_and_many_threads_accumulate_exactly(settings):
    stores = [store(settings), store(settings)]
    session = stores[0].create(engine.State())
    with stores[0].open(session.id, write=True) as s:
        program(s.state, [tensor("x", [1.0, 2.0])])
        stores[0].save(s)
    step = [{"op": "mul", "out": "y", "args": ["x", 2.0]}, {"op": "sum", "out": "s", "args": ["y"]},
            {"op": "backward", "args": ["s"]}]

    def backward(i: int) -> None:
        st = stores[i % 2]
        with st.open(session.id, write=True) as s:
            program(s.state, step)
            st.save(s)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(backward, range(40)))
    with stores[1].open(session.id, write=False) as s:
        x = s.state.tensors["x"]
        assert x.grad_accumulations == 40
        assert x.grad.data.tolist() == [80.0, 80.0]


def test_readers_see_whole_states_while_writers_of_the_same_process_work(settings):
    s = store(settings)
    session = s.create(engine.State())
    with s.open(session.id, write=True) as w:
        program(w.state, [tensor("x", [0.0])])
        s.save(w)
    stop = threading.Event()
    seen: list[int] = []

    def read() -> None:
        while not stop.is_set():
            with s.open(session.id, write=False) as r:
                seen.append(len(r.state.tensors))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(30):
            with s.open(session.id, write=True) as w:
                program(w.state, [tensor(f"t{i}a", 1.0)])
                program(w.state, [tensor(f"t{i}b", 1.0)])  # a reader must never see just one of the pair
                s.save(w)
    finally:
        stop.set()
        reader.join(10)
    assert seen and all(n % 2 == 1 for n in seen)


def test_a_session_deleted_while_a_writer_works_is_not_resurrected(settings):
    first, second = store(settings), store(settings)
    session = first.create(engine.State())
    with first.open(session.id, write=True) as w:
        program(w.state, [tensor("x", 1.0)])
        second.delete(session.id)
        with pytest.raises(SessionNotFound):
            first.save(w)
    with pytest.raises(SessionNotFound):
        with second.open(session.id, write=False):
            pass


def test_an_unreachable_redis_is_503_store_unavailable():
    settings = Settings(store_url=f"redis://127.0.0.1:{free_port()}/0")
    with TestClient(create_app(settings)) as client:
        response = client.post("/v1/sessions")
        assert_problem(response, 503, "store_unavailable")
        assert response.headers["Retry-After"]
    with pytest.raises(StoreUnavailable):
        make_store(settings).count()


def test_a_full_redis_is_503_store_unavailable_and_nothing_is_half_written(clients, redis_client, key_prefix):
    """maxmemory reached (noeviction): writes and renewals are refused by Redis; the client gets 503, and the
    session is as it was once Redis has room again."""
    a, b = clients
    sid = a.post("/v1/sessions").json()["id"]
    ok(run(a, sid, [tensor("x", [1.0, 2.0])]))
    before = redis_client.get(f"{key_prefix}state:{sid}")
    policy = redis_client.config_get("maxmemory-policy")["maxmemory-policy"]
    redis_client.config_set("maxmemory-policy", "noeviction")
    redis_client.config_set("maxmemory", 1)
    try:
        for client in (a, b):  # a: the event-loop path (cached), b: the thread pool (not cached)
            response = run(client, sid, [tensor("z", [3.0])])
            body = assert_problem(response, 503, "store_unavailable")
            assert "maxmemory" in body["detail"] and response.headers["Retry-After"]
    finally:
        redis_client.config_set("maxmemory", 0)
        redis_client.config_set("maxmemory-policy", policy)
    assert redis_client.get(f"{key_prefix}state:{sid}") == before
    for client in (a, b):
        assert list(client.get(f"/v1/sessions/{sid}").json()["tensors"]) == ["x"]
    ok(run(b, sid, [tensor("z", [3.0])]))
    assert sorted(a.get(f"/v1/sessions/{sid}").json()["tensors"]) == ["x", "z"]


def test_the_session_limit_is_checked_atomically_across_stores(settings):
    stores = [store(settings, max_sessions=5) for _ in range(4)]

    def create(i: int) -> bool:
        try:
            stores[i % 4].create(engine.State())
            return True
        except TooManySessions:
            return False

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(create, range(20))) == 5


# ----- keys and ownership ------------------------------------------------------------------------------------

ALICE, BOB = "alice-key-0123456789abcdef", "bob-key-0123456789abcdef"


def test_sessions_belong_to_their_key_across_processes_and_keys_are_never_stored(settings, redis_client,
                                                                                   key_prefix):
    keyed = settings.model_copy(update={"api_keys": SecretStr(f"{ALICE},{BOB}"), "max_sessions_per_key": 2})
    a_headers, b_headers = {"Authorization": f"Bearer {ALICE}"}, {"X-API-Key": BOB}
    with TestClient(create_app(keyed)) as a, TestClient(create_app(keyed)) as b:
        sid = a.post("/v1/sessions", headers=a_headers).json()["id"]
        ok(a.post(f"/v1/sessions/{sid}/ops", json={"ops": LINEAR}, headers=a_headers))
        for client in (a, b):  # the other key gets 404 from either process, for reads, writes and deletes
            assert_problem(client.get(f"/v1/sessions/{sid}/tensors", headers=b_headers), 404, "session_not_found")
            assert_problem(client.post(f"/v1/sessions/{sid}/backward", json={"tensor": "s"}, headers=b_headers),
                           404, "session_not_found")
            assert_problem(client.delete(f"/v1/sessions/{sid}", headers=b_headers), 404, "session_not_found")
            assert client.get("/v1/sessions", headers=b_headers).json()["sessions"] == []
        ok(b.post(f"/v1/sessions/{sid}/backward", json={"tensor": "s"}, headers=a_headers))
        assert [s["id"] for s in b.get("/v1/sessions", headers=a_headers).json()["sessions"]] == [sid]
        a.post("/v1/sessions", headers=a_headers)
        assert_problem(b.post("/v1/sessions", headers=a_headers), 429, "session_quota_exceeded")
        b.post("/v1/sessions", headers=b_headers)
        dump = b"".join(redis_client.dump(k) or b"" for k in redis_client.keys(f"{key_prefix}*"))
        assert ALICE.encode() not in dump and BOB.encode() not in dump
        assert redis_client.hget(f"{key_prefix}s:{sid}", "owner").decode() == \
            hashlib.sha256(ALICE.encode()).hexdigest()
        assert b.delete(f"/v1/sessions/{sid}", headers=a_headers).status_code == 204
        a.post("/v1/sessions", headers=a_headers)  # the quota counts live sessions only
