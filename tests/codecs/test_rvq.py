"""``burble.codecs.rvq.ResidualVQ``: codes, the prefix property, EMA training, dead codes, dropout."""

from __future__ import annotations

import pytest
import torch

from burble.codecs.rvq import ResidualVQ

DIM, BOOKS, SIZE = 16, 8, 64


def trained_quantizer(steps: int = 50, seed: int = 0) -> ResidualVQ:
    """A ResidualVQ after ``steps`` EMA steps on Gaussian data, each row coded with 1..8 books
    (quantiser dropout, as the codec trains)."""
    torch.manual_seed(seed)
    rvq = ResidualVQ(DIM, BOOKS, SIZE).train()
    for _ in range(steps):
        rvq(torch.randn(1024, DIM), torch.randint(1, BOOKS + 1, (1024,)))
    return rvq.eval()


@pytest.fixture(scope="module")
def rvq() -> ResidualVQ:
    return trained_quantizer()


def errors_by_books(rvq: ResidualVQ, z: torch.Tensor) -> list[float]:
    return [float((z - rvq(z, k).quantized).pow(2).sum(1).mean()) for k in range(1, rvq.num_books + 1)]


def strictly_decreasing(values: list[float]) -> bool:
    return all(b < a for a, b in zip(values, values[1:]))


def test_codes_are_integers_in_range(rvq):
    q = rvq(torch.randn(500, DIM) * 3)  # far outside the training data too
    assert q.codes.dtype == torch.int64 and q.codes.shape == (500, BOOKS)
    assert int(q.codes.min()) >= 0 and int(q.codes.max()) < SIZE


def test_the_expected_vector_of_a_distribution_over_codes(rvq):
    """One-hot rows give ``decode``'s vectors; a 30/70 mixture of two codes in each book gives the
    same mixture of their vectors (a codec LM's posterior mean); books beyond the first add theirs."""
    codes = rvq(torch.randn(20, DIM)).codes[:, :3]
    other = (codes + 1) % SIZE
    onehot = torch.nn.functional.one_hot(codes, SIZE).float()  # (rows, books, size)
    assert torch.allclose(rvq.expected(onehot), rvq.decode(codes), atol=1e-6)
    mixed = 0.3 * onehot + 0.7 * torch.nn.functional.one_hot(other, SIZE).float()
    assert torch.allclose(rvq.expected(mixed), 0.3 * rvq.decode(codes) + 0.7 * rvq.decode(other), atol=1e-6)
    assert not torch.allclose(rvq.expected(mixed[:, :1]), rvq.expected(mixed), atol=1e-3)


def test_fewer_books_are_a_prefix_and_decode_alike(rvq):
    z = torch.randn(300, DIM)
    full = rvq(z)
    for k in range(1, BOOKS + 1):
        q = rvq(z, k)
        assert torch.equal(q.codes[:, :k], full.codes[:, :k])
        assert torch.allclose(rvq.decode(q.codes[:, :k]), q.quantized, atol=1e-6)


def test_more_books_never_increase_the_error_of_a_trained_quantizer(rvq):
    torch.manual_seed(1)
    z = torch.randn(4096, DIM)  # fresh data from the training distribution
    errors = errors_by_books(rvq, z)
    # measured (seed 0): 11.3 8.0 5.7 4.1 3.1 2.3 1.8 1.5, from a signal energy of 16.1
    assert errors[0] < float(z.pow(2).sum(1).mean())
    assert strictly_decreasing(errors), errors


def test_negative_control_a_book_of_far_codes_increases_the_error(rvq):
    broken = trained_quantizer()
    broken.embed[3] = broken.embed[3] + 5.0  # book 4: every code far from any residual
    errors = errors_by_books(broken, torch.randn(4096, DIM))
    assert errors[3] > errors[2] and not strictly_decreasing(errors)


def test_first_batch_seeds_the_codebooks():
    torch.manual_seed(0)
    rvq = ResidualVQ(DIM, 2, SIZE).train()
    z = torch.randn(256, DIM)
    rvq(z)
    # book 0's codes are rows of the batch (then moved by one EMA step towards their assignments)
    assert bool(rvq.initialized)
    fresh = ResidualVQ(DIM, 2, SIZE)
    torch.manual_seed(0)
    fresh._initialize(z)
    assert all(bool((z == row).all(1).any()) for row in fresh.embed[0])


def test_dead_codes_are_reseeded_from_the_batch():
    torch.manual_seed(0)
    rvq = ResidualVQ(4, 1, 8).train()
    rvq(torch.randn(64, 4))  # initialise
    with torch.no_grad():
        far = torch.full((4,), 100.0)
        rvq.embed[0, 5], rvq.embed_sum[0, 5], rvq.usage[0, 5] = far, far, 0.0  # dead: never used
        rvq.embed[0, 6], rvq.embed_sum[0, 6], rvq.usage[0, 6] = far, far, 1.0  # unused but alive
    z = torch.randn(64, 4)
    rvq(z)
    assert bool((z == rvq.embed[0, 5]).all(1).any()), "the dead code is not a row of the batch"
    assert float(rvq.usage[0, 5]) == 1.0
    # the control: a code above the usage threshold is not re-seeded, though nothing chose it
    assert torch.allclose(rvq.embed[0, 6], far, rtol=1e-3)


def test_quantizer_dropout_codes_each_row_with_its_own_books(rvq):
    torch.manual_seed(2)
    z = torch.randn(400, DIM)
    counts = torch.randint(1, BOOKS + 1, (400,))
    q = rvq(z, counts)
    for k in range(1, BOOKS + 1):
        rows = counts == k
        # books >= k add nothing to these rows: the sum of their first k books, as with k for all
        assert torch.allclose(q.quantized[rows], rvq.decode(q.codes[rows, :k]), atol=1e-6)
        assert torch.allclose(q.quantized[rows], rvq(z[rows], k).quantized, atol=1e-6)
    assert not torch.allclose(rvq(z, 2).quantized, rvq(z, 8).quantized)  # control: the count matters


def test_quantizer_dropout_trains_each_book_only_on_rows_that_use_it():
    rvq = trained_quantizer(steps=1)
    rvq.train()
    z = torch.randn(512, DIM, requires_grad=True)
    counts = torch.randint(1, BOOKS, (512,))  # no row uses book 8
    before = rvq.usage.sum(1).clone()
    embed_8 = rvq.embed[BOOKS - 1].clone()
    q = rvq(z, counts)
    for book in range(BOOKS - 1):
        active = int((counts > book).sum())
        assert float(rvq.usage[book].sum()) == pytest.approx(rvq.decay * float(before[book]) + (1 - rvq.decay) * active, rel=1e-5)
    assert torch.equal(rvq.embed[BOOKS - 1], embed_8)
    # straight-through: the gradient of the quantised rows flows to z unchanged
    q.quantized.sum().backward()
    assert torch.equal(z.grad, torch.ones_like(z))
