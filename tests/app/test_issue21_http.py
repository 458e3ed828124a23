"""Issue 21 through the HTTP API (``POST /v1/eval``): the gradients that were wrong, valid calls that failed
(the linalg family's empty matrices, zero norms' JVPs, polygamma's long sums against the request deadline)
and what random programs found (a -0.0 through mm, torch's messages for rand() and an overflowing expand).
Expected numbers are torch 2.13's."""

from __future__ import annotations

import math

from tests.app.conftest import assert_problem, make_client, ok


def f64(name: str, value, requires_grad: bool = True) -> dict:
    kwargs = {"dtype": "float64", **({"requires_grad": True} if requires_grad else {})}
    return {"op": "tensor", "out": name, "args": [value], "kwargs": kwargs}


def evaluate(client, ops: list[dict], names: list[str]) -> dict:
    return ok(client.post("/v1/eval", json={"ops": ops, "return": names}))["tensors"]


def test_wrong_gradients_are_torchs_now(client):
    t = evaluate(client, [
        f64("x", [[2.0, 0.0, 3.0], [1.0, 4.0, 5.0]]),
        {"op": "prod", "args": ["x", 1], "out": "p"}, {"op": "sum", "args": ["p"], "out": "s"},
        {"op": "grad", "args": ["s", "x"], "kwargs": {"create_graph": True}, "out": "g"},
        {"op": "sum", "args": ["g"], "out": "gs"}, {"op": "grad", "args": ["gs", "x"], "out": "gg"},
        f64("c", [0.0, 5.0, -5.0]), f64("lo", [1.0, 1.0, 1.0]), f64("hi", [-1.0, -1.0, -1.0]),
        {"op": "clamp", "args": ["c", "lo", "hi"], "out": "k"}, {"op": "sum", "args": ["k"], "out": "ks"},
        {"op": "grad", "args": ["ks", ["c", "lo", "hi"]], "out": ["gc", "glo", "ghi"]},
        f64("m", [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]), {"op": "trace", "args": ["m"], "out": "tr"},
        {"op": "grad", "args": ["tr", "m"], "out": "gm"},
        f64("e", [0.0, 800.0, -1.0]), {"op": "elu", "args": ["e"], "out": "el"},
        {"op": "sum", "args": ["el"], "out": "es"},
        {"op": "grad", "args": ["es", "e"], "kwargs": {"create_graph": True}, "out": "ge"},
        {"op": "sum", "args": ["ge"], "out": "ges"}, {"op": "grad", "args": ["ges", "e"], "out": "gge"},
        f64("d", [-4988429.2], False), {"op": "digamma", "args": ["d"], "out": "dg"},
    ], ["gg", "glo", "ghi", "gm", "ge", "gge", "dg"])
    assert t["gg"]["data"] == [[3.0, 5.0, 2.0], [9.0, 6.0, 5.0]]
    assert (t["glo"]["data"], t["ghi"]["data"]) == ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    assert t["gm"]["data"] == [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    assert t["ge"]["grad_fn"] == "EluBackwardBackward0"
    assert t["gge"]["data"][:2] == [0.0, 0.0] and math.isclose(t["gge"]["data"][2], math.exp(-1.0), rel_tol=1e-15)
    assert math.isclose(t["dg"]["data"][0], 19.74666305338891, rel_tol=1e-15)


def test_logsumexp_jvp_over_an_empty_dim_is_nan(client):
    t = evaluate(client, [
        f64("x", [[], []], False), f64("v", [[], []], False), {"op": "enter_dual_level"},
        {"op": "make_dual", "args": ["x", "v"], "out": "d"}, {"op": "logsumexp", "args": ["d", 1], "out": "y"},
        {"op": "unpack_dual", "args": ["y"], "out": ["p", "tg"]}, {"op": "exit_dual_level"}], ["p", "tg"])
    assert t["p"]["data"] == ["-Infinity", "-Infinity"] and t["tg"]["data"] == ["NaN", "NaN"]


def test_empty_matrices_of_the_linalg_family_with_requires_grad(client):
    # a (2, 0, 0) batch from a (2, 0) leaf (JSON cannot spell it directly), b of shape (2, 0)
    ops = [f64("a0", [[], []]), {"op": "reshape", "args": ["a0", [2, 0, 0]], "out": "a"}, f64("b", [[], []])]
    names = []
    for op in ("linalg.det", "logdet", "linalg.cholesky", "linalg.inv"):
        out = op.replace(".", "_")
        ops += [{"op": op, "args": ["a"], "out": out}, {"op": "sum", "args": [out], "out": f"{out}_s"},
                {"op": "grad", "args": [f"{out}_s", "a0"], "out": f"{out}_g"}]
        names += [out, f"{out}_g"]
    ops += [{"op": "linalg.slogdet", "args": ["a"], "out": ["sign", "lad"]},
            {"op": "linalg.solve", "args": ["a", "b"], "out": "x"}, {"op": "sum", "args": ["x"], "out": "xs"},
            {"op": "grad", "args": ["xs", ["a0", "b"]], "out": ["ga", "gb"]}]
    t = evaluate(client, ops, [*names, "sign", "lad", "x", "ga", "gb"])
    assert t["linalg_det"]["data"] == [1.0, 1.0] and t["linalg_det"]["grad_fn"] == "LinalgDetBackward0"
    assert t["logdet"]["data"] == [0.0, 0.0] and t["lad"]["data"] == [0.0, 0.0] and t["sign"]["data"] == [1.0, 1.0]
    assert t["linalg_cholesky"]["shape"] == [2, 0, 0] and t["x"]["shape"] == [2, 0]
    assert all(t[f"{n}_g"]["shape"] == [2, 0] for n in ("linalg_det", "logdet", "linalg_cholesky", "linalg_inv"))
    assert (t["ga"]["shape"], t["gb"]["shape"]) == ([2, 0], [2, 0])


def test_zero_norm_jvps_and_norms_over_nothing(client):
    ops = [f64("x", [1.0, 0.0, 2.0], False), f64("v", [1.0, 1.0, 1.0], False), {"op": "enter_dual_level"},
           {"op": "make_dual", "args": ["x", "v"], "out": "d"}]
    names = []
    for op, args in (("linalg.vector_norm", [0]), ("linalg.norm", [0]), ("norm", [0]), ("normalize", [0, 0])):
        out = op.replace(".", "_")
        ops += [{"op": op, "args": ["d", *args], "out": out},
                {"op": "unpack_dual", "args": [out], "out": [f"{out}_p", f"{out}_t"]}]
        names.append(f"{out}_t")
    ops += [{"op": "exit_dual_level"}, f64("e", [[]]), {"op": "reshape", "args": ["e", [0, 0]], "out": "e0"},
            {"op": "linalg.norm", "args": ["e0", "Infinity"], "out": "ninf"}]
    t = evaluate(client, ops, [*names, "ninf"])
    assert [t[n]["data"] for n in names[:3]] == [0.0, 0.0, 0.0] and t["normalize_t"]["data"] == [0.5, 0.5, 0.5]
    assert t["ninf"]["data"] == 0.0 and t["ninf"]["requires_grad"] is False
    r = client.post("/v1/eval", json={"ops": [f64("e", []), {"op": "linalg.vector_norm", "args": ["e", "-Infinity"]}]})
    assert_problem(r, 422, detail="linalg.vector_norm cannot compute the -inf norm on an empty tensor because the "
                                  "operation does not have an identity")


def test_shape_ops_on_empty_and_zero_dim_inputs(client):
    t = evaluate(client, [
        f64("y", [[1.0, 2.0, 3.0, 4.0]] * 3), {"op": "unsqueeze", "args": ["y", 0], "out": "y1"},
        {"op": "narrow", "args": ["y1", 0, 0, 0], "out": "empty_batch"},
        {"op": "pad", "args": ["empty_batch", [1, 1]], "kwargs": {"mode": "circular"}, "out": "padded"},
        {"op": "sum", "args": ["padded"], "out": "ps"}, {"op": "grad", "args": ["ps", "y"], "out": "gy"},
        f64("leg", []), f64("m", [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
        {"op": "cat", "args": [["leg", "m", "leg"]], "out": "c"}, {"op": "sum", "args": ["c"], "out": "cs"},
        {"op": "grad", "args": ["cs", ["leg", "m"]], "out": ["gleg", "gm"]},
        f64("s", 3.0), {"op": "squeeze", "args": ["s", [0]], "out": "sq"},
        {"op": "grad", "args": ["sq", "s"], "out": "gs"},
        {"op": "tensor", "args": [True], "out": "mask"}, {"op": "masked_select", "args": ["s", "mask"], "out": "ms"},
        {"op": "sum", "args": ["ms"], "out": "mss"}, {"op": "grad", "args": ["mss", "s"], "out": "gms"},
    ], ["padded", "gy", "c", "gleg", "gm", "gs", "gms"])
    assert t["padded"]["shape"] == [0, 3, 6] and t["gy"]["data"] == [[0.0] * 4] * 3
    assert t["c"]["shape"] == [2, 3] and t["gleg"]["shape"] == [0] and t["gm"]["data"] == [[1.0] * 3] * 2
    assert t["gs"]["data"] == 1.0 and t["gms"]["data"] == 1.0


def test_polygamma_long_sums_are_torchs_and_stop_at_the_deadline(client):
    t = evaluate(client, [f64("x", [-134377.5], False), {"op": "polygamma", "args": [2, "x"], "out": "y"}], ["y"])
    assert math.isclose(t["y"]["data"][0], -5.537990353614657e-11, rel_tol=1e-13)
    with make_client(request_deadline_seconds=0.3) as c:
        r = c.post("/v1/eval", json={"ops": [f64("x", [-1e8 - 0.5], False), {"op": "polygamma", "args": [2, "x"]}]})
        body = assert_problem(r, 504, "deadline_exceeded")
        assert "GRADSERVE_REQUEST_DEADLINE_SECONDS" in body["detail"]


def test_what_random_programs_found(client):
    t = evaluate(client, [
        f64("a", [[-1.0], [2.0]], False), f64("b", [[0.0, 3.0]], False), {"op": "mm", "args": ["a", "b"], "out": "p"},
        {"op": "reciprocal", "args": ["p"], "out": "r"}], ["r"])
    assert t["r"]["data"][0][0] == "-Infinity" and t["r"]["data"][1][0] == "Infinity"
    r = client.post("/v1/eval", json={"ops": [{"op": "randn"}]})
    body = assert_problem(r, 422)
    assert body["detail"].startswith("randn() received an invalid combination of arguments - got (), but expected "
                                     "one of:\n * (tuple of ints size, *, torch.Generator generator,")
    expand = {"op": "expand", "args": ["z", 2 ** 31, 2 ** 32]}
    r = client.post("/v1/eval", json={"ops": [f64("z", [[0.0]], False), expand]})
    assert_problem(r, 422, detail="numel: integer multiplication overflow")


def test_det_at_a_singular_matrix_under_create_graph_has_a_graph(client):
    t = evaluate(client, [
        f64("a", [[1.0, 2.0], [2.0, 4.0]]), {"op": "linalg.det", "args": ["a"], "out": "d"},
        {"op": "backward", "args": ["d"], "kwargs": {"create_graph": True}},
        {"op": "sum", "args": ["a.grad"], "out": "gs"}, {"op": "grad", "args": ["gs", "a"], "out": "gg"}], ["a", "gg"])
    assert t["a"]["grad"] is not None
    assert [[round(v, 12) for v in row] for row in t["gg"]["data"]] == [[1.0, -1.0], [-1.0, 1.0]]


def test_unpack_dual_primal_is_not_dual(client):
    t = evaluate(client, [
        f64("x", [1.0, 2.0], False), f64("v", [1.0, 1.0], False), {"op": "enter_dual_level"},
        {"op": "make_dual", "args": ["x", "v"], "out": "d"}, {"op": "mul", "args": ["d", 3.0], "out": "y"},
        {"op": "unpack_dual", "args": ["y"], "out": ["p", "tg"]},
        {"op": "unpack_dual", "args": ["p"], "out": ["pp", "pt"]}, {"op": "exit_dual_level"}], ["p", "tg", "pp"])
    assert t["p"]["data"] == [3.0, 6.0] and t["tg"]["data"] == [3.0, 3.0] and "pt" not in t
