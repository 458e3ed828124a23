"""A thread-safe client (issue 23 item 5): torch's multithreaded-backward pattern (threads each running forward
and backward on tensors of their own) gives every thread torch's gradients, through one shared session whose
op lists are per thread; a thread may use tensors another thread made."""

from __future__ import annotations

import threading

import gradserve
import gradserve.torch as torch


def _in_threads(target, n: int = 8) -> list:
    errors: list = []

    def run(i):
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def test_threads_each_doing_forward_and_backward_get_torch_s_gradients(server):
    results = {}

    def train_fn(i):
        x = torch.ones(5, 5, requires_grad=True)
        for _ in range(3):
            y = (x + 3) * (x + 4) * 0.5 * (i + 1)
            y.sum().backward()
        results[i] = x.grad.tolist()

    ctx = gradserve.torch._context.Context(client=gradserve.Client(server.url))
    token = gradserve.torch._context._current.set(None)
    saved = list(gradserve.torch._context._default)
    gradserve.torch._context._default[:] = [ctx]  # the process's default context, as a program without session()
    try:
        errors = _in_threads(train_fn, 10)
    finally:
        gradserve.torch._context._default[:] = saved
        gradserve.torch._context._current.reset(token)
        ctx.close()
    assert errors == []
    # d/dx of (x+3)(x+4)/2 * (i+1) at x=1 is (2x+7)/2 * (i+1) = 4.5 (i+1), accumulated over 3 backwards
    assert results == {i: [[13.5 * (i + 1)] * 5] * 5 for i in range(10)}


def test_threads_share_a_model_made_by_the_main_thread(ctx):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    expected = {}
    for i in range(6):
        expected[i] = model(torch.full((1, 4), float(i))).sum().item()
    got = {}

    def infer(i):
        with torch.no_grad():
            got[i] = model(torch.full((1, 4), float(i))).sum().item()

    # the threads run in the test's session: copy the context into each thread as a program's default
    import contextvars

    contexts = [contextvars.copy_context() for _ in range(6)]
    errors = _in_threads(lambda i: contexts[i].run(infer, i), 6)
    assert errors == [] and got == expected


def test_a_thread_may_use_a_tensor_another_thread_has_not_sent_yet(ctx):
    import contextvars

    made = {}
    ready, used = threading.Event(), threading.Event()
    context = contextvars.copy_context()

    def producer():
        made["t"] = torch.arange(3, dtype=torch.float32) * 2  # recorded, not sent
        ready.set()
        used.wait(30)

    def consumer():
        ready.wait(30)
        made["sum"] = (made["t"] + 1).sum().item()
        used.set()

    a = threading.Thread(target=lambda: context.copy().run(producer))
    b = threading.Thread(target=lambda: context.copy().run(consumer))
    a.start(), b.start()
    a.join(30), b.join(30)
    assert made["sum"] == 9.0


def test_a_failing_op_of_one_thread_is_raised_in_that_thread(ctx):
    import contextvars

    context = contextvars.copy_context()
    recorded, sent = threading.Event(), threading.Event()
    outcome = {}

    def bad():
        a = torch.ones(2)[torch.tensor([5])]  # fails on the server (a value-dependent error), recorded only
        recorded.set()
        sent.wait(30)
        try:
            a.item()
        except IndexError as exc:
            outcome["bad"] = str(exc)

    def good():
        recorded.wait(30)
        outcome["good"] = (torch.ones(2) * 3).sum().item()  # sends the other thread's ops first
        sent.set()

    threads = [threading.Thread(target=lambda f=f: context.copy().run(f)) for f in (bad, good)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert outcome["good"] == 6.0
    assert outcome["bad"].startswith("index 5 is out of bounds for dimension 0 with size 2"), outcome


def test_a_name_another_thread_still_reads_is_not_deleted_with_this_thread_s_request(ctx, monkeypatch):
    """The race behind a rare NameError: this thread's request sends the other thread's ops first; while that
    request is in flight the other thread records an op reading a tensor and drops the tensor's last handle.
    The ``del`` of that name must wait until the op reading it is sent."""
    import queue

    jobs: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()

    def worker():  # "thread A": runs what the test hands it, in order
        while (job := jobs.get()) is not None:
            try:
                done.put((job(), None))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                done.put((None, exc))

    def in_a(job):
        jobs.put(job)
        value, error = done.get(timeout=30)
        if error is not None:
            raise error
        return value

    a = threading.Thread(target=worker)
    a.start()
    try:
        x = torch.ones(3)
        held = {}
        in_a(lambda: held.update(t=x + 3))  # recorded by A, not sent
        send_others = ctx._send_others

        def then_a_reads_and_drops_t():
            send_others()  # A's `add` is sent: t exists on the server
            in_a(lambda: held.update(z=held.pop("t") * 2))  # A records `mul` reading t, and drops t

        monkeypatch.setattr(ctx, "_send_others", then_a_reads_and_drops_t)
        assert torch.ones(1).item() == 1.0  # this thread's request: must not `del` t yet
        monkeypatch.undo()
        assert in_a(lambda: held["z"].tolist()) == [8.0, 8.0, 8.0]
    finally:
        jobs.put(None)
        a.join(30)


def test_ops_of_several_threads_are_sent_in_the_order_they_were_recorded(ctx):
    """A thread reads a tensor that the reading thread recorded and has not sent: the read sends the reading
    thread's earlier ops, then the other thread's, then its own rest, so that every name exists when used."""
    import contextvars

    x = torch.ones(3) * 2  # recorded here, not sent
    made = {}
    context = contextvars.copy_context()
    t = threading.Thread(target=lambda: context.copy().run(lambda: made.update(y=x + 1)))
    t.start()
    t.join(30)
    z = x * 5
    assert z.sum().item() == 30.0  # sends: this thread's `ones`, `mul`; the thread's `add`; then `mul` by 5
    assert made["y"].tolist() == [3.0, 3.0, 3.0]
