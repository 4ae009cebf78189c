"""The CPU engine's BLAS path for fp32 matmul (RFC 0005 "Matmul and BLAS").

Large matmuls whose operands have a unit stride on one matrix axis run on ``scipy-openblas32``'s
sgemm (NoTrans / Trans per operand, a column-major output as C^T = B^T A^T); everything else stays
on the built-in kernel. Both sides of that line are checked here against float64, with outputs in
NaN-filled buffers whose guard regions must stay untouched: odd sizes, batch broadcast, transposed
operands, a column-major output, padded leading dimensions, a non-unit-stride operand (built-in
kernel at a BLAS size), and execute-time overrides that move one plan across the threshold.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import pytest

import hipdnn
from hipdnn import reference

F32 = hipdnn.DataType.FLOAT
GUARD = 13
TOL = 2e-5


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    if not any(p.name == "hipdnn_cpu_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the CPU engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


def compact(dims: list[int]) -> list[int]:
    out, acc = [0] * len(dims), 1
    for i in reversed(range(len(dims))):
        out[i] = acc
        acc *= dims[i]
    return out


def transposed(dims: list[int]) -> list[int]:
    """Strides of a batch of column-major matrices: the last two axes swapped in memory."""
    *batch, r, c = dims
    inner = compact([*batch, c, r])
    return [*inner[:-2], 1, r]


def padded(dims: list[int], pad: int) -> list[int]:
    """Row-major matrices whose rows are ``pad`` elements longer than the row (ld > cols)."""
    *batch, r, c = dims
    out, acc = [0] * len(dims), r * (c + pad)
    out[-1], out[-2] = 1, c + pad
    for i in reversed(range(len(batch))):
        out[i] = acc
        acc *= batch[i]
    return out


def extent(dims: list[int], strides: list[int]) -> int:
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


def data(rng: np.random.Generator, dims: list[int], strides: list[int]) -> np.ndarray:
    """Random float32 values at ``strides`` inside a NaN-filled buffer (the gaps stay NaN)."""
    base = np.full(extent(dims, strides), np.nan, np.float32)
    view = np.lib.stride_tricks.as_strided(base, shape=dims, strides=[4 * s for s in strides])
    view[...] = rng.standard_normal(dims).astype(np.float32)
    return view


class Out:
    """A NaN-filled output buffer with guards; ``view`` is what the engine writes."""

    def __init__(self, dims: list[int], strides: list[int]) -> None:
        self.base = np.full(extent(dims, strides) + 2 * GUARD, np.nan, np.float32)
        self.view = np.lib.stride_tricks.as_strided(self.base[GUARD:], shape=dims, strides=[4 * s for s in strides])
        self.dims, self.strides = dims, strides

    def check(self, want: np.ndarray) -> None:
        assert not np.isnan(self.view).any(), "an output element was not written"
        assert reference.relative_error(self.view, want) < TOL
        offs = np.zeros(self.dims, np.int64)
        for axis, (n, s) in enumerate(zip(self.dims, self.strides)):
            shape = [1] * len(self.dims)
            shape[axis] = n
            offs = offs + (np.arange(n) * s).reshape(shape)
        outside = np.ones(self.base.shape, bool)
        outside[GUARD + offs.ravel()] = False
        assert np.isnan(self.base[outside]).all(), "the engine wrote outside the output view"


def workspace(g: hipdnn.Graph) -> np.ndarray:
    return np.empty(max(1, g.get_workspace_size()), np.uint8)


def run_matmul(
    handle: hipdnn.Handle,
    ad: list[int],
    as_: list[int],
    bd: list[int],
    bs: list[int],
    cd: list[int],
    cs: list[int],
    seed: int = 0,
) -> None:
    g = hipdnn.Graph(name="mm_blas", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    a = g.tensor(name="a", dim=ad, stride=as_, data_type=F32)
    b = g.tensor(name="b", dim=bd, stride=bs, data_type=F32)
    c = g.matmul(a, b)
    c.set_output(True).set_dim(cd).set_stride(cs)
    g.build(handle)
    rng = np.random.default_rng(seed)
    av, bv = data(rng, ad, as_), data(rng, bd, bs)
    out = Out(cd, cs)
    g.execute(handle, {a: av, b: bv, c: out.view}, workspace(g))
    out.check(reference.matmul(av, bv))


# (A dims, B dims): the C dims follow by broadcasting.
SHAPES = {
    "odd_129x257x65": ([1, 129, 65], [1, 65, 257]),
    "square_512": ([1, 512, 512], [1, 512, 512]),
    "batch_broadcast": ([3, 1, 130, 96], [1, 2, 96, 140]),
    "rank2": ([200, 300], [300, 100]),
    "m1_gemv_like": ([1, 1, 4096], [1, 4096, 600]),
    "below_threshold": ([2, 70, 33], [2, 33, 90]),
}


def c_dims(ad: list[int], bd: list[int]) -> list[int]:
    batch = list(np.broadcast_shapes(tuple(ad[:-2]), tuple(bd[:-2])))
    return [*batch, ad[-2], bd[-1]]


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt", "c_colmajor", "padded"])
def test_matmul_layouts(handle: hipdnn.Handle, name: str, layout: str) -> None:
    ad, bd = SHAPES[name]
    cd = c_dims(ad, bd)
    as_, bs, cs = compact(ad), compact(bd), compact(cd)
    if layout in ("tn", "tt"):
        as_ = transposed(ad)
    if layout in ("nt", "tt"):
        bs = transposed(bd)
    if layout == "c_colmajor":
        cs = transposed(cd)
    if layout == "padded":
        as_, bs, cs = padded(ad, 3), padded(bd, 5), padded(cd, 7)
    run_matmul(handle, ad, as_, bd, bs, cd, cs, seed=len(name))


def test_non_unit_stride_operand_uses_the_builtin_kernel(handle: hipdnn.Handle) -> None:
    """A with stride 2 along K (no unit stride on either matrix axis): BLAS cannot read it in place."""
    ad, bd = [1, 160, 150], [1, 150, 170]
    as_ = [160 * 150 * 2, 150 * 2, 2]
    run_matmul(handle, ad, as_, bd, compact(bd), c_dims(ad, bd), compact(c_dims(ad, bd)))


def test_overridden_m_crosses_the_threshold(handle: hipdnn.Handle) -> None:
    """One plan built at a BLAS size runs with M overridden both to a small size (built-in kernel)
    and to another BLAS size, with padded output rows."""
    k, n, m_max = 256, 192, 400
    g = hipdnn.Graph(
        name="mm_over",
        io_data_type=F32,
        intermediate_data_type=F32,
        compute_data_type=F32,
        is_override_shape_enabled=True,
    )
    a = g.tensor(name="a", dim=[2, m_max, k], stride=compact([2, m_max, k]), data_type=F32)
    b = g.tensor(name="b", dim=[1, k, n], stride=compact([1, k, n]), data_type=F32)
    c = g.matmul(a, b)
    c.set_output(True)
    g.build(handle)
    ws = workspace(g)
    rng = np.random.default_rng(7)
    bv = data(rng, [1, k, n], compact([1, k, n]))
    for m in (3, 37, 300, m_max):
        ad, as_ = [2, m, k], compact([2, m, k])
        cd, cs = [2, m, n], padded([2, m, n], 9)
        av = data(rng, ad, as_)
        out = Out(cd, cs)
        g.execute(
            handle,
            {a: av, b: bv, c: out.view},
            ws,
            overrides={a: hipdnn.OverrideEntry(ad, as_), c: hipdnn.OverrideEntry(cd, cs)},
        )
        out.check(reference.matmul(av, bv))


def test_nan_and_inf_propagate(handle: hipdnn.Handle) -> None:
    """sgemm with beta = 0 must not read C, and a NaN / inf in A reaches its output row."""
    ad, bd = [1, 256, 128], [1, 128, 256]
    g = hipdnn.Graph(name="mm_nan", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    a = g.tensor(name="a", dim=ad, stride=compact(ad), data_type=F32)
    b = g.tensor(name="b", dim=bd, stride=compact(bd), data_type=F32)
    c = g.matmul(a, b)
    c.set_output(True)
    g.build(handle)
    rng = np.random.default_rng(3)
    av = rng.standard_normal(ad).astype(np.float32)
    bv = rng.standard_normal(bd).astype(np.float32)
    av[0, 5, 7] = np.nan
    av[0, 9, 2] = np.inf
    out = Out([1, 256, 256], compact([1, 256, 256]))
    g.execute(handle, {a: av, b: bv, c: out.view}, workspace(g))
    got = out.view
    assert np.isnan(got[0, 5]).all()
    assert not np.isnan(np.delete(got[0], [5, 9], axis=0)).any()
    assert np.isinf(got[0, 9]).any() or np.isnan(got[0, 9]).any()
    want = reference.matmul(np.delete(av, [5, 9], axis=1), bv)
    assert reference.relative_error(np.delete(got, [5, 9], axis=1), want) < TOL


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_plugin_links_the_blas_when_installed(handle: hipdnn.Handle) -> None:
    """scipy-openblas32 is a build requirement, so the CPU engine built with it (HIPDNN_CPU_BLAS=AUTO)
    and its RPATH found the library when the plugin loaded."""
    pytest.importorskip("scipy_openblas32")
    with open("/proc/self/maps") as f:
        maps = f.read()
    assert "libscipy_openblas.so" in maps
