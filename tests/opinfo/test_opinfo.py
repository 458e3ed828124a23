"""The OpInfo suite in CI, bounded: the first sample of every mapped ``op_db`` entry (float64 through every
phase, float32 forward, error_inputs) and one sample per op over HTTP, against real torch; skipped without
torch. ``python3 dev.py opinfo`` runs every sample and prints the figures."""

from __future__ import annotations

import pytest

from gradserve_server.engine.registry import OPS
from tests.opinfo.mapping import CATALOG_OP

#: samples of each kind per op in CI (the full run: ``python3 dev.py opinfo``)
SAMPLES_PER_OP = 1


def test_every_mapped_op_is_a_catalog_op():
    assert sorted(n for n, op in CATALOG_OP.items() if op not in OPS) == []


@pytest.fixture(scope="module")
def opinfo():
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")  # torch.testing._internal needs it
    from tests.opinfo import run
    from tests.opinfo.transport import HttpEval
    infos = {f"{o.name}.{o.variant_test_name}" if o.variant_test_name else o.name: o for o in run.op_infos()}
    http = HttpEval()
    yield run, infos, http
    http.close()


def test_every_mapping_key_is_an_op_db_entry(opinfo):
    _, infos, _ = opinfo
    assert sorted(set(CATALOG_OP) - set(infos)) == []


@pytest.mark.parametrize("name", sorted(CATALOG_OP))
def test_opinfo_samples_match_torch(opinfo, name):
    run, infos, http = opinfo
    from tests.opinfo.deviations import classify
    stats = run.Stats()
    run.run_op(infos[name], stats, SAMPLES_PER_OP, 0, http)
    bad = [m for m in stats.mismatches if classify(m)[0] == "mismatch"]
    assert not bad, "\n".join(f"{m.kind} {m.index} {m.cls}: {m.detail}" for m in bad)
    # every sample is run or counted by reason: nothing silently dropped
    assert stats.samples[name] + sum(c[name] for c in stats.not_expressible.values()) + \
        stats.errors_total[name] > 0


def test_comparison_reports_a_wrong_value_a_wrong_gradient_and_a_missing_error(opinfo):
    """The suite is not vacuous: an engine that answers wrongly is caught in each phase."""
    import numpy as np

    from tests.opinfo.suite import Outcome, Phases, error_input, run_engine, seeded
    run, infos, _ = opinfo
    info = infos["mul"]
    sample = next(iter(info.sample_inputs("cpu", __import__("torch").float64, requires_grad=True)))

    def doctored(ops, names):
        got = run_engine(ops, names)
        return Outcome(tensors=[None if t is None else (t[0] + 1e-3, t[1]) for t in got.tensors],
                       grad_fns=["AddBackward0"] * len(names))

    ph = Phases(info, "mul", sample, seeded("mul", "sample", 0))
    assert ph.forward() == [] and ph.reverse() == []
    ph.runner = doctored
    assert {c for c, _ in ph.forward()} == {"forward", "grad_fn"}
    assert [c for c, _ in ph.reverse()] and ph.reverse()[0][0] == "reverse"
    assert ph.forward_ad() and ph.gradgrad()

    # error_inputs: kthvalue's k out of range agrees; the engine made to accept it is caught ('accepted')
    from tests.opinfo import suite
    ei = next(e for e in infos["kthvalue"].error_inputs("cpu") if "out" not in e.sample_input.kwargs)
    agrees, e = error_input(infos["kthvalue"], "kthvalue", ei)
    assert agrees and e is None

    def accepting(ops, names):
        return Outcome(tensors=[(np.zeros(()), "float64")] * len(names))
    real, suite.run_engine = suite.run_engine, accepting
    try:
        agrees, e = error_input(infos["kthvalue"], "kthvalue", ei)
    finally:
        suite.run_engine = real
    assert not agrees and e[0] == "accepted"


def test_samples_the_op_list_cannot_say_are_counted_by_reason(opinfo):
    import torch
    from torch.testing._internal.opinfo.core import SampleInput

    from tests.opinfo.suite import NotExpressible, encode
    for sample, reason in [(SampleInput(torch.ones(2, dtype=torch.complex128)), "complex tensor"),
                           (SampleInput(torch.ones(2, dtype=torch.uint16)), "uint16 tensor"),
                           (SampleInput(torch.ones(2), kwargs={"out": torch.ones(2)}), "out="),
                           (SampleInput(torch.ones(2), args=(lambda x: x,)), "callable argument")]:
        with pytest.raises(NotExpressible) as exc:
            encode("abs", sample)
        assert exc.value.reason == reason


def test_half_comparison_counts_one_ulp_and_reports_four(opinfo):
    """float16/bfloat16 values: within two units in the last place they pass but are counted as not bit for bit
    (the figures print them); further off they are a mismatch."""
    import ml_dtypes
    import numpy as np

    from tests.opinfo.suite import HALF_INEXACT, tensor_diff
    for name, npdt, ulp in (("float16", np.float16, 2.0**-10), ("bfloat16", ml_dtypes.bfloat16, 2.0**-7)):
        ref = np.array([1.0, 1.5], npdt)
        before = HALF_INEXACT.get("probe", 0)
        assert tensor_diff((ref, name), ((ref.astype(np.float32) + ulp).astype(npdt), name), op="probe") is None
        assert HALF_INEXACT["probe"] == before + 1
        assert tensor_diff((ref, name), ((ref.astype(np.float32) + 4 * ulp).astype(npdt), name)) is not None
