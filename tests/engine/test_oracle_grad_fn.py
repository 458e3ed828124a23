"""Golden parity with PyTorch for the 189 ``grad_fn`` expressions of the oracle catalog.

Each expression is evaluated against ``engine.torch_compat`` after the catalog's prelude (and setup), and
checked in four aspects, one test each so that a gap is named precisely:

* ``forward``: value (rtol 1e-5, atol 1e-6), dtype, shape, requires_grad, is_leaf, grad_fn name (also
  ``grad_fn.name()``), identity with a prelude tensor, ``_version`` and the case's extra expressions;
* ``graph``: node names, next_functions (None edges included, shared nodes shared), AccumulateGrad
  variables by prelude name, the ``_saved_*`` slots holding tensors (which object / which value);
* ``backward``: ``result.backward(G)`` with G = 1, 2, 3, ... gives torch's gradient for every prelude leaf;
* ``second_backward``: a second ``backward(G)`` without retain_graph succeeds or fails with torch's error.

Repr strings are compared only once the engine prints tensors (see ``oracle.ENGINE_PRINTS``).
"""

from __future__ import annotations

import pytest

from gradserve_server.engine.node import SavedTensor

from .oracle import diff, encode, encode_tensor, entries, error_record, namespace, tensor_values, values_close

# nn.Linear's initial weights and dropout's mask come from torch's random generator: for these the
# structure is compared, the values are not.
RANDOM_VALUES = {
    "nn_linear_module": "nn.Linear's weight and bias are drawn by torch's RNG",
    "dropout_train": "the dropout mask is drawn by torch's RNG",
    "dropout_module_train": "the dropout mask is drawn by torch's RNG",
}

LEAVES = ("x", "y", "p", "s", "A", "B", "W", "b", "C", "D")
ASPECTS = ("forward", "graph", "backward", "second_backward")

# Cases that fail in every aspect (the expression itself raises): case id -> why.
BROKEN_CASES: dict[str, str] = {
}

_SAVED_INDICES = ("engine bug: IndexBackward0 keeps `indices` as plain data, not saved tensors: torch lists "
                  "_saved_indices (int64 tensors) among the saved tensors, so the graph holds saved tensors")
_NOT_UNPACKED = ("engine bug: the second backward succeeds; torch fails with the freed-graph error because "
                 "{} still holds a freed saved tensor. The engine raises only when a VJP reads a freed slot; "
                 "torch unpacks every saved variable of a node before running it")
_COPYSLICES_NAME = ("engine bug: grad_fn.name() of CopySlices is 'torch::autograd::CopySlices' in torch, "
                    "'CopySlices' in the engine")

# What the engine does not match yet, one reason per "<case id>::<aspect>". strict: a fixed gap fails the
# run until it is removed from this list.
KNOWN_GAPS: dict[str, str] = {
    **{f"{case}::{aspect}": reason for case, reason in BROKEN_CASES.items() for aspect in ASPECTS},
}


def _params():
    out = []
    for case in entries("grad_fn"):
        for aspect in ASPECTS:
            if aspect != "forward" and "graph" not in case and case["id"] not in BROKEN_CASES:
                continue  # leaves and non-differentiable results: nothing to walk or backpropagate
            key = f"{case['id']}::{aspect}"
            marks = [pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[key])] if key in KNOWN_GAPS else []
            out.append(pytest.param(case, aspect, id=key, marks=marks))
    return out


def _evaluate(case: dict):
    ns = namespace()
    if "setup" in case:
        exec(case["setup"], ns)
    return ns, eval(case["expr"], ns)


def _name_of(engine_tensor, ns: dict):
    for name, v in ns.items():
        if getattr(v, "_t", None) is engine_tensor:
            return name
    return None


def _upstream(case: dict, result):
    from gradserve_server.engine.torch_compat import torch
    return torch.tensor(case["upstream_G"], dtype=result.dtype)


def check_forward(case: dict) -> list[str]:
    ns, result = _evaluate(case)
    problems = []
    expected = dict(case["result"])
    actual = encode_tensor(result)
    if case["id"] in RANDOM_VALUES:
        expected["value"] = actual["value"] = None
        expected.pop("repr", None)
        actual.pop("repr", None)
    problems += diff({"tensor": expected}, {"tensor": actual}, "result")
    if "result_is" in case and result is not ns[case["result_is"]]:
        problems.append(f"result is not {case['result_is']} itself")
    if result._version != case["result_version"]:
        problems.append(f"result._version: expected {case['result_version']}, got {result._version}")
    if "grad_fn_name_method" in case and result.grad_fn is not None:
        name = result.grad_fn.name()
        if name != case["grad_fn_name_method"]:
            problems.append(f"grad_fn.name(): expected {case['grad_fn_name_method']!r}, got {name!r}")
    for expr, want in case.get("extra", {}).items():
        got = encode(eval(expr, ns))
        problems += diff(want, got, expr)
    return problems


def check_graph(case: dict) -> list[str]:
    ns, result = _evaluate(case)
    graph = case["graph"]
    nodes = graph["nodes"]
    random_values = case["id"] in RANDOM_VALUES
    problems: list[str] = []
    mapping: dict[str, object] = {}

    def visit(key: str, node, path: str):
        if key in mapping:
            if mapping[key] is not node:
                problems.append(f"{path}: expected the node shared with an earlier edge ({nodes[key]['name']})")
            return
        mapping[key] = node
        exp = nodes[key]
        if node.name != exp["name"]:
            problems.append(f"{path}: expected {exp['name']}, got {node.name}")
            return
        if exp["name"] == "AccumulateGrad" and exp.get("variable") is not None:
            got = _name_of(node.variable, ns)
            if got != exp["variable"]:
                problems.append(f"{path}.variable: expected {exp['variable']}, got {got}")
        want_saved = sorted(exp.get("saved_tensors", []))
        got_saved = sorted(f"_saved_{k}" for k, v in node.saved.items() if _saved_tensors_of(v))
        if want_saved != got_saved:
            problems.append(f"{path} saved tensors: expected {want_saved}, got {got_saved}")
        for attr in want_saved:
            specs = exp["saved"][attr]
            specs = specs if isinstance(specs, list) else [specs]
            slots = _saved_tensors_of(node.saved.get(attr[len("_saved_"):]))
            if len(slots) != len(specs):
                continue
            for spec, slot in zip(specs, slots):
                problems.extend(_saved_problems(f"{path}.{attr}", spec, slot.tensor, ns, random_values))
        want_edges = exp["next_functions"]
        got_edges = node.next_functions
        if len(want_edges) != len(got_edges):
            problems.append(f"{path}.next_functions: expected {len(want_edges)} edges, got {len(got_edges)}: "
                            f"{[(None if n is None else n.name, i) for n, i in got_edges]}")
            return
        for i, (we, (child, nr)) in enumerate(zip(want_edges, got_edges)):
            where = f"{path}.next_functions[{i}]"
            if we is None:
                if child is not None:
                    problems.append(f"{where}: expected None, got {child.name}")
                continue
            if child is None:
                problems.append(f"{where}: expected {nodes[we[0]]['name']}, got None")
                continue
            if nr != we[1]:
                problems.append(f"{where}: expected output_nr {we[1]}, got {nr}")
            visit(we[0], child, f"{where}[{nodes[we[0]]['name']}]")

    root = result._t.grad_fn
    visit(graph["root"], root, nodes[graph["root"]]["name"])
    holds = any(n.holds_saved_tensors() for n in mapping.values())
    if holds != case["graph_holds_saved_tensors"]:
        problems.append(f"graph holds saved tensors: expected {case['graph_holds_saved_tensors']}, got {holds}")
    return problems


def _saved_tensors_of(value) -> list:
    """The SavedTensor objects in a node's slot (torch saves lists of tensors too, e.g. index indices)."""
    if isinstance(value, SavedTensor):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, SavedTensor) for v in value):
        return list(value)
    return []


def _saved_problems(where: str, spec: dict, t, ns: dict, random_values: bool) -> list[str]:
    if "is" in spec and t is not ns[spec["is"]]._t:
        return [f"{where}: expected the prelude tensor {spec['is']} itself"]
    if list(t.data.shape) != spec["shape"] or t.dtype != spec["dtype"]:
        return [f"{where}: expected {spec['dtype']}{spec['shape']}, got {t.dtype}{list(t.data.shape)}"]
    if "value" in spec and not random_values and not values_close(spec["value"], tensor_values(t)):
        return [f"{where}: expected value {spec['value']}, got {tensor_values(t)}"]
    return []


def check_backward(case: dict) -> list[str]:
    ns, result = _evaluate(case)
    result.backward(_upstream(case, result))
    problems = []
    for name in LEAVES:
        want = case["grads"].get(name)
        got = ns[name].grad
        if want is None:
            if got is not None:
                problems.append(f"{name}.grad: expected None, got {tensor_values(got)}")
            continue
        if got is None:
            problems.append(f"{name}.grad: expected {want}, got None")
            continue
        if got.dtype != ns[name].dtype or list(got.shape) != list(ns[name].shape):
            problems.append(f"{name}.grad: expected {ns[name].dtype}{list(ns[name].shape)}, got "
                            f"{got.dtype}{list(got.shape)}")
        elif case["id"] not in RANDOM_VALUES and not values_close(want, tensor_values(got)):
            problems.append(f"{name}.grad: expected {want}, got {tensor_values(got)}")
    return problems


def check_second_backward(case: dict) -> list[str]:
    ns, result = _evaluate(case)
    G = _upstream(case, result)
    result.backward(G)
    try:
        result.backward(G)
    except Exception as exc:  # noqa: BLE001 - compared with torch's outcome
        got = {"ok": False, "error": error_record(exc)}
    else:
        got = {"ok": True}
    want = case["second_backward"]
    return [] if got == want else [f"second backward: expected {want}, got {got}"]


CHECKS = {"forward": check_forward, "graph": check_graph, "backward": check_backward,
          "second_backward": check_second_backward}


@pytest.mark.parametrize("case, aspect", _params())
def test_grad_fn_case_matches_torch(case, aspect):
    problems = CHECKS[aspect](case)
    assert not problems, f"{case['expr']!r} ({case.get('setup', '')!r}):\n  " + "\n  ".join(problems)


def test_known_gaps_name_existing_cases():
    ids = {f"{c['id']}::{a}" for c in entries("grad_fn") for a in ASPECTS}
    assert set(KNOWN_GAPS) <= ids, sorted(set(KNOWN_GAPS) - ids)
