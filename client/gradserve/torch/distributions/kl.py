"""``torch.distributions.kl``: ``kl_divergence(p, q)`` by the pair of types (the most specific registered pair),
``register_kl`` for more; the pairs of one kind come with torch's formulas."""

from __future__ import annotations

import math

_KL: dict[tuple[type, type], object] = {}


def register_kl(type_p: type, type_q: type):
    """A decorator registering ``fn(p, q)`` as the KL divergence of ``type_p`` from ``type_q``."""

    def decorator(fn):
        _KL[type_p, type_q] = fn
        return fn

    return decorator


def _dispatch(type_p: type, type_q: type):
    found = [(sp, sq) for sp, sq in _KL if issubclass(type_p, sp) and issubclass(type_q, sq)]
    if not found:
        return None
    best = min(found, key=lambda pair: (type_p.__mro__.index(pair[0]), type_q.__mro__.index(pair[1])))
    return _KL[best]


#: the kinds torch derives from ExponentialFamily: a pair of two of them torch refuses (Bregman divergences)
_EXPONENTIAL = ("Normal", "Bernoulli", "Categorical")


def kl_divergence(p, q):
    fn = _dispatch(type(p), type(q))
    if fn is None:
        if type(p).__name__ in _EXPONENTIAL and type(q).__name__ in _EXPONENTIAL:
            raise NotImplementedError("The cross KL-divergence between different exponential families cannot"
                                      + " " * 29 + "be computed using Bregman divergences")
        raise NotImplementedError(f"gradserve: kl_divergence of a {type(p).__name__} from a {type(q).__name__} is "
                                  f"not implemented here (torch's pairs of one kind are)")
    return fn(p, q)


def _register_builtin(D) -> None:
    """The pairs of one kind, of the distributions module ``D`` (handed over: while it is being imported,
    ``from gradserve.torch import distributions`` would ask gradserve.torch's ``__getattr__``, i.e. the server's
    catalog)."""
    import gradserve.torch as torch

    @register_kl(D.Normal, D.Normal)
    def _kl_normal_normal(p, q):
        var_ratio = (p.scale / q.scale).pow(2)
        t1 = ((p.loc - q.loc) / q.scale).pow(2)
        return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())

    @register_kl(D.Bernoulli, D.Bernoulli)
    def _kl_bernoulli_bernoulli(p, q):
        softplus = torch.nn.functional.softplus
        t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
        t1[q.probs == 0] = math.inf
        t1[p.probs == 0] = 0
        t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
        t2[q.probs == 1] = math.inf
        t2[p.probs == 1] = 0
        return t1 + t2

    @register_kl(D.Categorical, D.Categorical)
    def _kl_categorical_categorical(p, q):
        t = p.probs * (p.logits - q.logits)
        t[(q.probs == 0).expand_as(t)] = math.inf
        t[(p.probs == 0).expand_as(t)] = 0
        return t.sum(-1)

    @register_kl(D.Uniform, D.Uniform)
    def _kl_uniform_uniform(p, q):
        result = ((q.high - q.low) / (p.high - p.low)).log()
        result[(q.low > p.low) | (q.high < p.high)] = math.inf
        return result
