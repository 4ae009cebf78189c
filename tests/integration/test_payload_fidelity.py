"""Property tests: whatever valid overrides a caller passes reach the plugin's override entry exactly
(uids, ranks, shapes, strides, in the caller's order), for graphs of several tensors of rank 2-5.
The override sets are shape-consistent (each RELU's input and output share a shape), as execute
checks; strides are drawn per tensor."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import hipdnn

from .support import FLOAT, execute_calls, ptr, strided_view

OVERRIDE = "fake_override_v110"
ODD_DIMS = [1, 2, 3, 5, 7, 37, 129]


def layout_strides(dims, order):
    """Compact strides for ``dims`` laid out with ``order`` (outermost axis first)."""
    strides = [0] * len(dims)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= dims[axis]
    return strides


def declared_order(strides):
    """Outermost to innermost axis of a declared layout (ties by axis index, as the spec's
    'stride order' reading of a layout gives no other tie-break)."""
    return sorted(range(len(strides)), key=lambda i: (-strides[i], i))


@st.composite
def tensor_decl(draw, budget):
    rank = draw(st.integers(2, 5))
    dims = []
    for _ in range(rank):
        room = budget // max(math.prod(dims), 1)
        dims.append(draw(st.sampled_from([d for d in ODD_DIMS if d <= room] or [1])))
    order = draw(st.permutations(range(rank)))
    return dims, layout_strides(dims, list(order))


@st.composite
def override_shape(draw, dims):
    """A valid override shape of a tensor declared with ``dims``: each dim within its maximum."""
    return [draw(st.sampled_from(sorted({1, d, max(1, d // 2)} | {draw(st.integers(1, d))}))) for d in dims]


@st.composite
def override_for(draw, dims, strides, *, huge=False, shape=None):
    """A valid override of a tensor declared (dims, strides): each dim within its maximum (``shape``
    when given), strides keeping the declared axis order, possibly padded."""
    if shape is None:
        shape = draw(override_shape(dims))
    out = [0] * len(dims)
    step = draw(st.integers(1, 3))
    pads = st.integers(0, 1 << 20) if huge else st.sampled_from([0, 0, 0, 1, 2, 7])
    for axis in reversed(declared_order(strides)):
        out[axis] = step
        step = step * shape[axis] + draw(pads)
    return shape, out


def relu_graph(decls, *, uid_base):
    """One RELU node per declared input: x_i (declared layout) -> y_i (output, row-major)."""
    g = hipdnn.Graph(name="fidelity", io_data_type=FLOAT, is_override_shape_enabled=True)
    tensors = []
    for i, (dims, strides) in enumerate(decls):
        x = g.tensor(name=f"x{i}", dim=dims, stride=strides, uid=uid_base + 2 * i)
        y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x, name=f"relu{i}")
        y.set_output(True).set_uid(uid_base + 2 * i + 1)
        tensors += [x, y]
    return g, tensors


def addressed_elems(shape, stride):
    return sum((d - 1) * s for d, s in zip(shape, stride)) + 1


@st.composite
def pair_overrides(draw, tensors, *, huge=False):
    """Overrides of a relu_graph's ``tensors`` = [x0, y0, x1, y1, ...]: a nonempty random subset of
    the RELU pairs, both tensors of a chosen pair given the same shape (execute re-runs the node's
    shape rule, out = in, on the effective shapes) and each its own strides; all the entries in one
    random order. Returns [(tensor, shape, stride), ...]."""
    pairs = list(zip(tensors[0::2], tensors[1::2]))
    picked = draw(st.lists(st.sampled_from(range(len(pairs))), min_size=1, unique=True))
    entries = []
    for i in picked:
        x, y = pairs[i]
        shape = draw(override_shape(x.get_dim()))
        for t in (x, y):
            stride = draw(override_for(t.get_dim(), t.get_stride(), huge=huge, shape=shape))[1]
            if huge and max(stride) >= (1 << 62):
                stride = layout_strides(shape, declared_order(t.get_stride()))
            entries.append((t, shape, stride))
    return list(draw(st.permutations(entries)))


def test_payload_is_delivered_bit_for_bit(fakes, fake_handle_factory):
    h = fake_handle_factory(OVERRIDE)

    @settings(max_examples=50, deadline=None, database=None)
    @given(data=st.data())
    def check(data):
        decls = data.draw(st.lists(tensor_decl(1 << 15), min_size=1, max_size=3))
        uid_base = data.draw(st.sampled_from([1, 17, 1000, 1 << 40]))
        g, tensors = relu_graph(decls, uid_base=uid_base)
        g.build(h)
        entries = data.draw(pair_overrides(tensors))
        over = {id(t): (s, st_) for t, s, st_ in entries}
        vp = {}
        for t in tensors:
            if id(t) in over:
                # a view stating the override's shape and strides (issue #26), over a store as large as
                # the declared maximum or what the override addresses
                shape, stride = over[id(t)]
                base = np.zeros(max(math.prod(t.get_dim()), addressed_elems(shape, stride)), np.float32)
                vp[t] = strided_view(shape, stride, base=base)
            else:
                base = np.zeros(math.prod(t.get_dim()), np.float32)
                vp[t] = strided_view(t.get_dim(), t.get_stride(), base=base)
        fakes[OVERRIDE].reset()
        g.execute(
            h,
            vp,
            None,
            override_uids=[t.get_uid() for t, _, _ in entries],
            override_shapes=[s for _, s, _ in entries],
            override_strides=[s for _, _, s in entries],
        )
        calls = execute_calls(fakes, [OVERRIDE])
        assert [r["entry"] for _, r in calls] == ["ExecuteOpGraphWithOverrides"]
        rec = calls[0][1]
        assert rec["num_overrides"] == len(entries)
        assert rec["override_uids"] == [t.get_uid() for t, _, _ in entries]
        assert rec["override_lengths"] == [t.get_rank() for t, _, _ in entries]
        assert rec["override_shapes"] == [s for _, s, _ in entries]
        assert rec["override_strides"] == [s for _, _, s in entries]
        assert rec["buffers"] == [[t.get_uid(), ptr(a)] for t, a in vp.items()]

    check()


def test_large_values_survive_through_bare_pointers(fakes, fake_handle_factory):
    """Bare int pointers are not bounds-checked, so declared maxima and strides can be far beyond
    any real allocation: the int64 values must still arrive unchanged."""
    h = fake_handle_factory(OVERRIDE)
    big_dims = [1, 3, 37, 129, (1 << 31) - 1, 1 << 33]

    @settings(max_examples=30, deadline=None, database=None)
    @given(data=st.data())
    def check(data):
        decls = []
        for _ in range(data.draw(st.integers(1, 3))):
            dims: list[int] = []
            for _ in range(data.draw(st.integers(2, 5))):
                room = (1 << 62) // max(math.prod(dims), 1)  # keep every stride inside int64
                dims.append(data.draw(st.sampled_from([d for d in big_dims if d <= room])))
            order = list(data.draw(st.permutations(range(len(dims)))))
            decls.append((dims, layout_strides(dims, order)))
        g, tensors = relu_graph(decls, uid_base=data.draw(st.sampled_from([5, (1 << 62) + 3])))
        g.build(h)
        entries = data.draw(pair_overrides(tensors, huge=True))
        # A node's output may not share memory with another tensor, and a bare pointer spans what its
        # tensor addresses at this call: the tensors are laid out one after another. Once the address
        # space is used up, the rest start at its last free byte and run past its end, where no
        # memory is and the aliasing check has nothing to compare; their values travel unchanged.
        layout = {t: (t.get_dim(), t.get_stride()) for t in tensors}
        layout.update({t: (s, st_) for t, s, st_ in entries})
        vp, cursor = {}, 1 << 12
        for t in tensors:
            dims, strides = layout[t]
            extent = 4 * (1 + sum((d - 1) * s for d, s in zip(dims, strides)))
            vp[t] = cursor
            if cursor + extent < 1 << 64:
                cursor += extent
        fakes[OVERRIDE].reset()
        g.execute(
            h,
            vp,
            None,
            overrides={t: hipdnn.OverrideEntry(shape=s, stride=st_) for t, s, st_ in entries},
        )
        rec = fakes[OVERRIDE].calls("ExecuteOpGraphWithOverrides")[0]
        assert rec["override_uids"] == [t.get_uid() for t, _, _ in entries]
        assert rec["override_lengths"] == [len(s) for _, s, _ in entries]
        assert rec["override_shapes"] == [s for _, s, _ in entries]
        assert rec["override_strides"] == [s for _, _, s in entries]

    check()
