"""torch.einsum, composed exactly as ATen's ``einsum`` (Linear.cpp) composes it, so the graph shows
torch's nodes: per operand ``diagonal``/``movedim`` for repeated labels, ``unsqueeze`` for missing ones
and one ``permute`` into the common label order; then operands are contracted left to right by
``sumproduct_pair`` (permute, reshape, ``bmm``, view, permute) and the contracted dims are dropped by a
``view`` (or, for one operand, summed). No new primitive: the gradient comes from those ops.
"""

from __future__ import annotations

from ..errors import TorchRuntimeError
from ..registry import P, op
from ..tensor import Tensor
from .common import require_tensor
from .elementwise import mul
from .linalg import bmm
from .matrix import diagonal
from .reduction import sum as sum_
from .shape import permute, reshape, unsqueeze, view

_N_LETTERS = 26
_ELLIPSIS = 2 * _N_LETTERS


def _err(msg: str) -> TorchRuntimeError:
    return TorchRuntimeError(f"einsum(): {msg}", code="invalid_argument")


def _subscript(label: str) -> int:
    return ord(label) - ord("A") if label.isupper() else ord(label) - ord("a") + _N_LETTERS


def _label(s: int) -> str:
    return chr(s + ord("A")) if s < _N_LETTERS else chr(s - _N_LETTERS + ord("a"))


def _movedim_last_to(t: Tensor, dst: int) -> Tensor:
    nd = t.data.ndim
    order = list(range(nd - 1))
    order.insert(dst, nd - 1)
    return permute(t, order)


def _sumproduct_pair(left: Tensor, right: Tensor, sum_dims: list, keepdim: bool) -> Tensor:
    """(left * right).sum(sum_dims) through one bmm, as ATen's sumproduct_pair."""
    if not sum_dims:
        return mul(left, right)
    dim = left.data.ndim
    lro, lo, ro = [], [], []
    lro_size = lo_size = ro_size = sum_size = 1
    for i in range(dim):
        sl, sr = left.shape[i] != 1, right.shape[i] != 1
        if i in sum_dims:
            if sl and sr:
                if left.shape[i] != right.shape[i]:
                    raise TorchRuntimeError("non-broadcast dimensions must match", code="shape_mismatch")
                sum_size *= left.shape[i]
            elif sl:
                left = sum_(left, i, True)
            elif sr:
                right = sum_(right, i, True)
        elif sl and sr:
            lro.append(i)
            lro_size *= left.shape[i]
        elif sl:
            lo.append(i)
            lo_size *= left.shape[i]
        else:
            ro.append(i)
            ro_size *= right.shape[i]
    out_size = [left.shape[d] for d in lro] + [left.shape[d] for d in lo] + [1] * len(sum_dims) + \
        [right.shape[d] for d in ro]
    lperm = lro + lo + list(sum_dims) + ro
    rperm = lro + list(sum_dims) + ro + lo
    operm = [-1] * len(out_size)
    for i, d in enumerate(lro + lo + list(sum_dims) + ro):
        operm[d] = i
    lmat = reshape(permute(left, lperm), (lro_size, lo_size, sum_size))
    rmat = reshape(permute(right, rperm), (lro_size, sum_size, ro_size))
    result = permute(view(bmm(lmat, rmat), *out_size), operm)
    if not keepdim:
        result = view(result, *[s for i, s in enumerate(result.shape) if i not in sum_dims])
    return result


def _parse_lhs(lhs: str, num_ops: int) -> list:
    op_labels: list[list[int]] = [[] for _ in range(num_ops)]
    curr, ell_in_input, i = 0, False, 0
    while i < len(lhs):
        c = lhs[i]
        if c == " ":
            pass
        elif c == ".":
            if ell_in_input:
                raise _err(f"found '.' for operand {curr} for which an ellipsis was already found")
            if not (i + 2 < len(lhs) + 0 and lhs[i + 1:i + 3] == ".."):
                raise _err(f"found '.' for operand {curr} that is not part of any ellipsis")
            i += 2
            op_labels[curr].append(_ELLIPSIS)
            ell_in_input = True
        elif c == ",":
            curr += 1
            if curr >= num_ops:
                raise _err("fewer operands were provided than specified in the equation")
            ell_in_input = False
        elif c.isascii() and c.isalpha():
            op_labels[curr].append(_subscript(c))
        else:
            raise _err(f"invalid subscript given at index {i} in the equation string, subscripts must be in [a-zA-Z]")
        i += 1
    if curr != num_ops - 1:
        raise _err("more operands were provided than specified in the equation")
    return op_labels


@op("einsum", shape="einsum(equation,operands)",
    tensors=("operands",), grad_fns=(P.ViewBackward0, P.PermuteBackward0, P.SumBackward1, P.MulBackward0),
    method=False, family="linalg")
def einsum(equation, *operands):
    """torch.einsum(equation, *operands) (operands may also be one list); explicit ('->') or implicit output,
    ellipsis broadcasting, repeated labels (diagonals); contracted left to right as torch does without
    opt_einsum."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise TorchRuntimeError("einsum(): the equation must be a string", code="invalid_argument")
    if not operands:
        raise _err("must provide at least one operand")
    operands = [require_tensor(o, "operands", "einsum") for o in operands]
    num_ops = len(operands)
    arrow = equation.find("->")
    lhs = equation if arrow < 0 else equation[:arrow]
    op_labels = _parse_lhs(lhs, num_ops)

    label_count = [0] * (2 * _N_LETTERS)
    ell_num_dim = 0
    for i, (t, labels) in enumerate(zip(operands, op_labels)):
        ndims = t.data.ndim
        nlabels = len(labels)
        has_ell = _ELLIPSIS in labels
        for s in labels:
            if s == _ELLIPSIS:
                nlabels -= 1
            else:
                label_count[s] += 1
        if has_ell:
            ell_num_dim = max(ell_num_dim, ndims - nlabels)
        if (nlabels > ndims) if has_ell else (nlabels != ndims):
            raise _err(f"the number of subscripts in the equation ({nlabels}) "
                       f"{'is more than' if has_ell else 'does not match'} the number of dimensions ({ndims}) for "
                       f"operand {i}{'' if has_ell else ' and no ellipsis was given'}")

    perm_of = [-1] * (2 * _N_LETTERS)
    perm_index = ell_index = 0
    ell_in_output = False
    if arrow < 0:
        perm_index = ell_num_dim
        ell_in_output = True
        for s in range(2 * _N_LETTERS):
            if label_count[s] == 1:
                perm_of[s] = perm_index
                perm_index += 1
    else:
        rhs = equation[arrow + 2:]
        i = 0
        while i < len(rhs):
            c = rhs[i]
            if c == " ":
                pass
            elif c == ".":
                if ell_in_output:
                    raise _err("found '.' for output but an ellipsis (...) was already found")
                if rhs[i + 1:i + 3] != "..":
                    raise _err("found '.' for output that is not part of any ellipsis (...)")
                i += 2
                ell_index = perm_index
                perm_index += ell_num_dim
                ell_in_output = True
            elif c.isascii() and c.isalpha():
                s = _subscript(c)
                if label_count[s] == 0 or perm_of[s] != -1:
                    why = "appears more than once in the output" if perm_of[s] > -1 else \
                        "does not appear in the equation for any input operand"
                    raise _err(f"output subscript {c} {why}")
                perm_of[s] = perm_index
                perm_index += 1
            else:
                raise _err(f"invalid subscript given at index {len(lhs) + 2 + i} in the equation string, subscripts "
                           f"must be in [a-zA-Z]")
            i += 1
    out_num_dim = perm_index
    if not ell_in_output:
        ell_index = perm_index
        perm_index += ell_num_dim
    for s in range(2 * _N_LETTERS):
        if label_count[s] > 0 and perm_of[s] == -1:
            perm_of[s] = perm_index
            perm_index += 1

    label_size = [1] * (2 * _N_LETTERS)
    ell_sizes = [1] * ell_num_dim
    dim_counts = [0] * perm_index
    ops = []
    for i, (t, labels) in enumerate(zip(operands, op_labels)):
        cur = t
        permutation = [-1] * perm_index
        dim = 0
        for s in labels:
            if s == _ELLIPSIS:
                ndim = t.data.ndim - (len(labels) - 1)
                for j in range(ell_num_dim - ndim, ell_num_dim):
                    size = cur.shape[dim]
                    if size != 1:
                        if ell_sizes[j] not in (1, size):
                            raise _err(f"dimension {dim} covered by ellipsis in operand {i}has size {size} which does "
                                       f"not broadcast with previously seen ellipsis with size {ell_sizes[j]} for the "
                                       f"respective dimension")
                        ell_sizes[j] = size
                        dim_counts[ell_index + j] += 1
                    permutation[ell_index + j] = dim
                    dim += 1
            elif permutation[perm_of[s]] == -1:
                size = cur.shape[dim]
                if size != 1:
                    if label_size[s] not in (1, size):
                        raise _err(f"subscript {_label(s)} has size {size} for operand {i} which does not broadcast "
                                   f"with previously seen size {label_size[s]}")
                    label_size[s] = size
                    dim_counts[perm_of[s]] += 1
                permutation[perm_of[s]] = dim
                dim += 1
            else:
                prev = permutation[perm_of[s]]
                if cur.shape[dim] != cur.shape[prev]:
                    raise _err(f"subscript {_label(s)} is repeated for operand {i} but the sizes don't match, "
                               f"{cur.shape[dim]} != {cur.shape[prev]}")
                cur = _movedim_last_to(diagonal(cur, 0, prev, dim), prev)
        for k, val in enumerate(permutation):
            if val == -1:
                cur = unsqueeze(cur, dim)
                permutation[k] = dim
                dim += 1
        ops.append(permute(cur, permutation))

    while len(ops) > 1:
        a, b = ops[0], ops[1]
        del ops[:2]
        sum_dims, a_sum, b_sum = [], [], []
        for d in range(out_num_dim, perm_index):
            if a.shape[d] != 1 and b.shape[d] != 1:
                dim_counts[d] -= 1
                if dim_counts[d] == 1:
                    sum_dims.append(d)
                    dim_counts[d] = 0
            elif dim_counts[d] == 1:
                if a.shape[d] != 1:
                    a_sum.append(d)
                    dim_counts[d] = 0
                elif b.shape[d] != 1:
                    b_sum.append(d)
                    dim_counts[d] = 0
        if a_sum:
            a = sum_(a, a_sum, True)
        if b_sum:
            b = sum_(b, b_sum, True)
        ops.insert(0, _sumproduct_pair(a, b, sum_dims, True))

    result = ops[0]
    if perm_index - out_num_dim > 0:
        if num_ops > 1:
            return view(result, *result.shape[:out_num_dim])
        return sum_(result, list(range(out_num_dim, perm_index)))
    return result
