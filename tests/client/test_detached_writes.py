"""A write through a detached alias (``w.detach()``, ``w.data``) changes ``w``'s values and version, never its
autograd flags: the client keeps what it knows of ``w``'s flags (torch's refusal of ``w.add_()`` is raised at its
line, with nothing sent), and asks for ``w``'s values again."""

from __future__ import annotations

import pytest

from tests.client.test_grads_kept import _ops_sent as _requests


@pytest.mark.parametrize("alias", ["detach", "data"])
def test_a_write_through_a_detached_alias_keeps_the_leafs_flags(ctx, monkeypatch, alias):
    import gradserve.torch as torch

    w = torch.ones(3, requires_grad=True)
    sent = _requests(ctx, monkeypatch)
    (w.detach() if alias == "detach" else w.data).mul_(2)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        w.add_(1)
    assert sent == []  # (decided from the flags the client kept)
    assert w.requires_grad and w.is_leaf and sent == []
    assert w.tolist() == [2.0, 2.0, 2.0] and len(sent) == 1  # (the values are asked for again)


def test_a_new_leafs_version_is_known_without_asking(ctx, monkeypatch):
    import gradserve.torch as torch

    w = torch.ones(3, requires_grad=True)
    sent = _requests(ctx, monkeypatch)
    assert w._version == 0 and sent == []
