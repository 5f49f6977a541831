import pytest
import torch

from radiance_kernels.formats import rotation
from radiance_kernels.formats.rotation import dense_matrix, random_rotation, rotate, validate_rotation


def test_random_rotation_is_valid_and_deterministic():
    a = random_rotation(384, seed=3)
    b = random_rotation(384, seed=3)
    validate_rotation(*a)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], random_rotation(384, seed=4)[0])
    assert [t.shape for t in a] == [(8, 384), (8, 192), (1, 384)]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p, t, c: (p.to(torch.int32), t, c), "pairs must be int16"),
        (lambda p, t, c: (p[:, :200], t, c), "multiple of 128"),
        (lambda p, t, c: (p, t.float(), c), "theta must be float16"),
        (lambda p, t, c: (p, t[:, :10], c), "theta must be float16"),
        (lambda p, t, c: (p, t, c.reshape(-1)), "channel_scales must be float16"),
        (lambda p, t, c: (p.index_put((torch.tensor(3), torch.tensor(130)), p[3, 131]), t, c),
         "layer 3 group 1 is not a permutation"),
        (lambda p, t, c: (p, t.index_put((torch.tensor(0), torch.tensor(5)), torch.tensor(float("inf"),
                                          dtype=torch.float16)), c), "theta has 1 non-finite"),
        (lambda p, t, c: (p, t, c.index_put((torch.tensor(0), torch.tensor(7)), torch.tensor(0.0,
                                            dtype=torch.float16))), "channel_scales has 1 zero"),
    ],
)
def test_validate_names_tensor_and_problem(mutate, message):
    with pytest.raises(ValueError, match=message) as err:
        validate_rotation(*mutate(*random_rotation(256, seed=1)), name="layers.0.qkv")
    assert "layers.0.qkv" in str(err.value)


def test_rotation_is_orthogonal_and_matches_pairs_definition():
    pairs, theta, cs = random_rotation(256, seed=5)
    x = torch.randn(3, 256, dtype=torch.float64)
    # literal per-pair definition, layer by layer
    y = x * cs.double()
    for r in range(8):
        y = y.clone()
        for g in range(2):
            for t in range(64):
                i = 128 * g + int(pairs[r, 128 * g + 2 * t])
                j = 128 * g + int(pairs[r, 128 * g + 2 * t + 1])
                c, s = torch.tensor(float(theta[r, 64 * g + t])).double().cos(), \
                    torch.tensor(float(theta[r, 64 * g + t])).double().sin()
                xi, xj = y[:, i].clone(), y[:, j].clone()
                y[:, i], y[:, j] = c * xi + s * xj, -s * xi + c * xj
    got = rotate(x, pairs, theta, cs, dtype=torch.float64)
    assert torch.allclose(got, y, rtol=0, atol=1e-13)
    R = dense_matrix(pairs, theta)
    assert torch.allclose(R @ R.T, torch.eye(256, dtype=torch.float64), atol=1e-13)


def test_inference_identity_fp64():
    """y = ((x·cs) Rᵀ) Wᵀ equals the Givens path to 1e-12 relative (the seeds' identity)."""
    K, N = 512, 96
    pairs, theta, cs = random_rotation(K, seed=11)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, K, generator=gen, dtype=torch.float64)
    W = torch.randn(N, K, generator=gen, dtype=torch.float64)
    dense = ((x * cs.double()) @ dense_matrix(pairs, theta).T) @ W.T
    givens = rotate(x, pairs, theta, cs, dtype=torch.float64) @ W.T
    rel = ((dense - givens).norm() / givens.norm()).item()
    assert rel <= 1e-12, rel


def test_fp32_rotation_is_exact_op_order():
    """fp32 rotate == the explicit separately-rounded (c·x_k) + (s_k·x_mate) chain, and close to fp64."""
    K = 256
    pairs, theta, cs = random_rotation(K, seed=2)
    x = torch.randn(4, K)
    partner, cos, sin = rotation.givens_tables(pairs, theta)
    mate = partner.long() + torch.arange(0, K, 128).repeat_interleave(128)
    y = x * cs.float().reshape(K)
    for r in range(8):
        a = cos[r] * y
        b = sin[r] * y[:, mate[r]]
        y = a + b
    assert torch.equal(rotate(x, pairs, theta, cs), y)
    ref = rotate(x.double(), pairs, theta, cs, dtype=torch.float64)
    assert torch.allclose(y.double(), ref, rtol=0, atol=1e-5 * ref.abs().max().item())
