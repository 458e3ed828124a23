"""The client waits out the server's refusals for now (its rate limit, a busy session, a full queue: nothing was
applied) for the ``Retry-After`` they ask, and sends the request again; a training loop that outruns the server's
default rate limit slows down to it instead of failing after two seconds. Other refusals are raised at once."""

from __future__ import annotations

import logging

import httpx
import pytest

import gradserve
import gradserve.torch as torch
from tests.deploy.servers import Uvicorn


def _scripted(answers):
    """A mock transport answering ``answers`` in turn (then 200s), recording each request's method."""
    sent = []

    def handler(request: httpx.Request):
        sent.append(request.method)
        if len(sent) <= len(answers):
            status, code, headers = answers[len(sent) - 1]
            return httpx.Response(status, json={"status": status, "code": code, "detail": f"{code} now"},
                                  headers=headers)
        return httpx.Response(200, json={"ops": [], "tensors": {}, "autograd": [], "warnings": []})

    return httpx.MockTransport(handler), sent


@pytest.mark.parametrize(("status", "code"), [(429, "rate_limited"), (409, "session_busy"), (503, "server_busy")])
def test_a_refusal_for_now_is_sent_again_after_its_retry_after_whatever_the_method(status, code, caplog):
    transport, sent = _scripted([(status, code, {"Retry-After": "0.05"})] * 2)
    c = gradserve.Client("http://gradserve.invalid", transport=transport, retries=0)
    with caplog.at_level(logging.INFO, logger="gradserve"):
        c.run_ops("s", [])
    assert sent == ["POST", "POST", "POST"] and c.waited == pytest.approx(0.1)
    levels = [r.levelno for r in caplog.records if "for now" in r.getMessage()]
    assert levels == [logging.WARNING, logging.INFO]  # (the first wait of a client says why its loop slowed)
    assert code in caplog.records[0].getMessage() and "max_wait" in caplog.records[0].getMessage()


@pytest.mark.parametrize(("status", "code", "retry_after"), [
    (429, "too_many_sessions", "60"), (429, "session_quota_exceeded", "60"),
    (503, "store_unavailable", "5"),  # (a failed save may have reached the store: a POST is not sent again)
    (429, "rate_limited", "2"),  # (a wait past max_wait)
])
def test_other_refusals_and_waits_past_max_wait_are_raised_at_once(status, code, retry_after):
    transport, sent = _scripted([(status, code, {"Retry-After": retry_after})])
    c = gradserve.Client("http://gradserve.invalid", transport=transport, retries=2, max_wait=1.0)
    with pytest.raises(gradserve.ProblemError) as info:
        c.run_ops("s", [])
    assert info.value.code == code and sent == ["POST"] and c.waited == 0


def test_max_wait_bounds_one_request_s_waits_in_all():
    transport, sent = _scripted([(429, "rate_limited", {"Retry-After": "0.4"})] * 5)
    c = gradserve.Client("http://gradserve.invalid", transport=transport, max_wait=1.0)
    with pytest.raises(gradserve.ProblemError):
        c.run_ops("s", [])
    assert sent == ["POST"] * 3 and c.waited == pytest.approx(0.8)  # (a third wait would pass 1 s)


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """A server with a low rate limit per client address (the default applies one; the other client tests turn
    it off)."""
    env = {"GRADSERVE_RATE_LIMIT_PER_SECOND": "0", "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "20",
           "GRADSERVE_CLIENT_RATE_LIMIT_BURST": "5"}  # (5 requests in any 1 s)
    srv = Uvicorn.for_app(env, tmp_path_factory.mktemp("limited") / "uvicorn.log")
    srv.start()
    yield srv
    srv.stop()


def test_a_training_loop_past_the_server_s_rate_slows_down_to_it_and_applies_each_step_once(limited):
    client = gradserve.Client(limited.url)
    with gradserve.session(client=client):
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        steps = []
        for _ in range(12):
            loss = (w * w).sum()
            loss.backward()
            with torch.no_grad():
                w -= 0.25 * w.grad
            w.grad.zero_()
            steps.append(loss.item())
    # each step halves w: nothing applied twice, nothing lost, although the server refused some requests
    assert steps == [5.0 * 0.25 ** k for k in range(12)]
    assert client.waited > 0


def test_with_max_wait_0_the_refusal_reaches_the_line_that_synced(limited):
    client = gradserve.Client(limited.url, max_wait=0)
    refused = r"exceeds its rate of 5 requests in 1 s \(GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND"
    with pytest.raises(RuntimeError, match=refused), gradserve.session(client=client):
        x = torch.ones(2)
        for _ in range(40):
            (x + 1).sum().item()
