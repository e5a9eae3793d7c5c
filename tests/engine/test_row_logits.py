"""stack_rows: the sampled rows' logits as one (B, V) tensor, a view only where that is exact."""

import torch

from metagen.engine.row_logits import stack_rows


def test_consecutive_rows_of_one_tensor_are_a_view_of_it():
    x = torch.randn(5, 7)
    out = stack_rows([x[i:i + 1] for i in range(1, 4)])
    assert torch.equal(out, x[1:4])
    assert out.data_ptr() == x[1].data_ptr()  # no copy


def test_any_other_layout_is_copied_in_row_order():
    x = torch.randn(5, 7)
    cases = [
        [x[2:3], x[1:2], x[3:4]],  # out of order
        [x[1:2], x[1:2], x[1:2]],  # one row repeated (a prefill's forked samples)
        [x[0:1], x[2:3]],  # a gap
        [x[0:1], torch.randn(1, 7)],  # another tensor
        [x[:, :3][0:1], x[:, :3][1:2]],  # not contiguous
        [x[0:1], x[1:2].double()],  # another dtype
    ]
    for rows in cases:
        out = stack_rows(rows)
        assert torch.equal(out, torch.cat([r.to(out.dtype) for r in rows]))
        assert out.data_ptr() not in {r.data_ptr() for r in rows} or len(rows) == 1


def test_one_row_is_returned_as_is():
    x = torch.randn(3, 4)
    assert stack_rows([x[1:2]]) is not None and torch.equal(stack_rows([x[1:2]]), x[1:2])
