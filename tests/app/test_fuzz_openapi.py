"""Fuzzing from the OpenAPI document (schemathesis, in-process over ASGI): every operation with generated
valid and invalid inputs, and stateful chains through the document's links (create a session, then run
ops, backward, read, delete it). No 5xx, every response conforms to the document, every error is
application/problem+json. Derandomized and bounded, so that CI sees the same cases every run; the number of
generated cases is printed in the terminal summary."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.config import SchemathesisConfig

from gradserve_server.app.config import Settings
from gradserve_server.app.main import create_app
from tests.app.conftest import FUZZ_CASES

KEY = "fuzz-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}

APP = create_app(Settings(api_keys=KEY, rate_limit_per_second=0, auth_failures_per_minute=0, max_sessions=100_000,
                          max_sessions_per_key=100_000, access_log=False))

CONFIG = SchemathesisConfig.from_dict({
    "checks": {
        # the document describes the shape of an op list, not which programs the engine can run: a
        # schema-valid list may name an unknown op or tensor (404/422) or conflict with the session (409)
        "positive_data_acceptance": {"expected-statuses": ["2xx", "401", "404", "409", "422", "429"]},
    },
})
schema = schemathesis.openapi.from_asgi("/openapi.json", APP, config=CONFIG)

FUZZ = settings(max_examples=60, derandomize=True, database=None, deadline=None, print_blob=False,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck))


@schemathesis.check
def errors_are_problems(ctx, response, case) -> bool | None:
    """Every 4xx/5xx is application/problem+json with the RFC 9457 members, our code and the request id."""
    if response.status_code < 400:
        return None
    assert response.headers.get("content-type", [""])[0] == "application/problem+json", response.headers
    body = response.json()
    assert {"type", "title", "status", "detail", "code", "request_id"} <= set(body), body
    assert body["status"] == response.status_code and body["type"] == f"urn:gradserve:problem:{body['code']}"
    assert body["request_id"] == response.headers["x-request-id"][0]
    return True


@schema.parametrize()
@FUZZ
def test_every_operation_conforms_to_the_document(case):
    FUZZ_CASES["stateless"] += 1
    case.call_and_validate(headers=AUTH)


class Workflow(schema.as_state_machine()):
    def setup(self):
        # every scenario starts from an empty server: what it draws must not depend on earlier scenarios'
        # sessions (hypothesis replays choice sequences and insists they draw the same kinds of values)
        APP.state.store.close()

    def get_call_kwargs(self, case):
        return {"headers": AUTH}

    def step(self, input):
        FUZZ_CASES["stateful steps"] += 1
        return super().step(input)


TestStatefulChains = Workflow.TestCase
TestStatefulChains.settings = settings(FUZZ, max_examples=100, stateful_step_count=10)
