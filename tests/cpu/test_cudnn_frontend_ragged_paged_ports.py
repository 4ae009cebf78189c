"""cudnn-frontend's paged-cache sample and a ragged (THD) program written against its documentation,
ported to hipdnn (issue #29).

``samples/python/52_scaled_dot_product_attention_with_paged_caches.ipynb`` is transcribed cell by cell
below; what changed is the import (``cudnn`` is the small adapter ``_cudnn``) and the device (``cuda`` is
the CPU here, so ``.cuda()`` is gone and ``device="cuda"`` reads ``device=DEVICE``). The adapter maps
cudnn-frontend's handle-less graph calls (``graph.build_operation_graph()``,
``graph.execute(variant_pack, workspace)``) onto hipdnn's, which follow hipDNN and take the handle
first (rfcs/0011-cudnn-frontend-compatibility.md); the SDPA call itself, with
``paged_attention_k_table`` / ``paged_attention_v_table`` / ``paged_attention_max_seq_len_kv``, and
``tensor.set_ragged_offset`` are hipdnn's own and run as cudnn-frontend's code writes them.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import hipdnn

torch = pytest.importorskip("torch")
DEVICE = "cpu"


class _cudnn:
    """The port's ``import cudnn``: cudnn-frontend's module-level names over hipdnn."""

    data_type = hipdnn.DataType
    heur_mode = hipdnn.HeurMode
    _handle: hipdnn.Handle | None = None

    @staticmethod
    def create_handle() -> hipdnn.Handle:
        _cudnn._handle = hipdnn.Handle(device="cpu")
        return _cudnn._handle

    @staticmethod
    def destroy_handle(handle: hipdnn.Handle) -> None:
        handle.close()

    @staticmethod
    def backend_version() -> int:
        return 90500

    class pygraph(hipdnn.Graph):  # noqa: N801 (cudnn-frontend's name)
        """cudnn-frontend's graph: the handle is the module's current one unless given."""

        def __init__(self, handle: hipdnn.Handle | None = None, **kw: Any) -> None:
            super().__init__(name="port", **kw)
            self._port_handle = handle

        def _h(self) -> hipdnn.Handle:
            h = self._port_handle or _cudnn._handle
            assert h is not None
            return h

        def build_operation_graph(self, handle: Any = None) -> hipdnn.Graph:  # type: ignore[override]
            return super().build_operation_graph(handle or self._h())

        def execute(self, variant_pack: Any, workspace: Any, handle: Any = None) -> None:  # type: ignore[override]
            hipdnn.Graph.execute(self, handle or self._h(), variant_pack, workspace)


cudnn = _cudnn


def test_sample_52_paged_caches() -> None:
    # --- cell: setup
    torch.manual_seed(42)
    handle = cudnn.create_handle()
    assert cudnn.backend_version() >= 90500, "SDPA operation is only supported cuDNN version 9.5.0 or above"

    # --- cell: problem sizes and tensor setup
    b = 4  # batch size
    h = 12  # query number of heads
    s = 1024  # maximum sequence length
    d = 64  # embedding dimension per head

    block_size_k = block_size_v = 64  # block size to be used by the non contiguous K/V containers

    attn_scale = 1.0 / math.sqrt(d)

    # The tensors will have non-interleaved
    # BSHD (batch, sequence_length, num_head, dims_per_head) physical tensor layout
    # BHSD (batch, num_head, sequence_length, dims_per_head) logical tensor layout
    dims = (b, h, s, d)
    strides = (s * h * d, d, h * d, 1)

    q_gpu = torch.randn(b * s * h * d).half().as_strided(dims, strides)
    k_gpu = torch.randn(b * s * h * d).half().as_strided(dims, strides)
    v_gpu = torch.randn(b * s * h * d).half().as_strided(dims, strides)
    o_gpu = torch.empty(b * s * h * d).half().as_strided(dims, strides)

    # --- cell: variable sequence lengths (set to s for all batches, just for the notebook sample)
    seq_len_q_gpu = torch.full((b, 1, 1, 1), s, device=DEVICE)
    seq_len_kv_gpu = torch.full((b, 1, 1, 1), s, device=DEVICE)

    # --- cell: containers and page tables for K and V
    def create_container_and_page_table(tensor: Any, block_size: int) -> tuple[Any, Any]:
        B, H, S, D = tensor.shape
        blocks_per_batch = math.ceil(S / block_size)
        padding_seq = (blocks_per_batch * block_size) - S
        if padding_seq > 0:
            zeros = torch.zeros(B, H, padding_seq, D, device=DEVICE, dtype=tensor.dtype)
            cat_tensor = torch.cat((tensor, zeros), axis=2)
        else:
            cat_tensor = tensor
        container = torch.cat((cat_tensor.clone()).chunk(blocks_per_batch, dim=2), dim=0)
        table_size = math.ceil(S / block_size)
        page_table_temp = torch.linspace(
            0, B * table_size - 1, B * table_size, device=DEVICE, dtype=torch.int32
        ).reshape(table_size, 1, B, 1)
        page_table_temp = torch.transpose(page_table_temp, 0, 2)
        page_table = (
            torch.randn(blocks_per_batch * B)
            .int()
            .as_strided((B, 1, blocks_per_batch, 1), (blocks_per_batch, blocks_per_batch, 1, 1))
        )
        page_table.copy_(page_table_temp)
        return (container, page_table)

    container_k_gpu, page_table_k_gpu = create_container_and_page_table(k_gpu, block_size_k)
    container_v_gpu, page_table_v_gpu = create_container_and_page_table(v_gpu, block_size_v)

    # --- cell: create the graph
    graph = cudnn.pygraph(
        io_data_type=cudnn.data_type.HALF,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )

    q = graph.tensor_like(q_gpu)

    container_k = graph.tensor_like(container_k_gpu)
    container_v = graph.tensor_like(container_v_gpu)
    page_table_k = graph.tensor_like(page_table_k_gpu)
    page_table_v = graph.tensor_like(page_table_v_gpu)

    seq_len_q = graph.tensor_like(seq_len_q_gpu)
    seq_len_kv = graph.tensor_like(seq_len_kv_gpu)

    o, _ = graph.sdpa(
        name="sdpa",
        q=q,
        k=container_k,  # Container K: non contiguous container with K blocks
        v=container_v,  # Container V: non contiguous container with V blocks
        is_inference=True,
        attn_scale=attn_scale,
        use_causal_mask=True,
        use_padding_mask=True,
        seq_len_q=seq_len_q,
        seq_len_kv=seq_len_kv,
        paged_attention_k_table=page_table_k,  # Page Table K: Tensor containing offsets to the container with K blocks
        paged_attention_v_table=page_table_v,  # Page Table V: Tensor containing offsets to the container with V blocks
        paged_attention_max_seq_len_kv=s,  # The maximum sequence length for K caches (optional, but recommended)
    )

    o.set_output(True).set_dim(dims).set_stride(strides)

    # --- cell: build the graph
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()

    # --- cell: execute the graph
    variant_pack = {
        q: q_gpu,
        container_k: container_k_gpu,
        container_v: container_v_gpu,
        page_table_k: page_table_k_gpu,
        page_table_v: page_table_v_gpu,
        seq_len_q: seq_len_q_gpu,
        seq_len_kv: seq_len_kv_gpu,
        o: o_gpu,
    }

    workspace = torch.empty(graph.get_workspace_size(), device=DEVICE, dtype=torch.uint8)
    graph.execute(variant_pack, workspace)

    cudnn.destroy_handle(handle)

    # --- cell: the PyTorch reference
    q_ref = q_gpu.detach().float().requires_grad_()
    k_ref = k_gpu.detach().float().requires_grad_()
    v_ref = v_gpu.detach().float().requires_grad_()

    o_ref = torch.nn.functional.scaled_dot_product_attention(q_ref, k_ref, v_ref, is_causal=True, scale=attn_scale)

    torch.testing.assert_close(o_ref, o_gpu.float(), atol=5e-3, rtol=3e-3)


def test_thd_program_from_cudnn_frontends_documentation() -> None:
    """The ragged layout of cudnn-frontend's Attention.md: sequences packed back to back (THD), dims
    [B, H, S_max, D], strides [S*H*D, D, H*D, 1], offsets of (B + 1) cumulative token counts times H*D;
    forward with stats, then the backward on the same packing, against PyTorch per sequence."""
    handle = cudnn.create_handle()
    torch.manual_seed(0)
    seq_lens = [2, 3, 37, 129, 1]
    b, h, d, s_max = len(seq_lens), 4, 64, 129
    t = sum(seq_lens)
    cu = torch.tensor([0] + seq_lens).cumsum(0)
    offset = (cu * h * d).to(torch.int64).view(b + 1, 1, 1, 1)
    stats_offset = (cu * h).to(torch.int64).view(b + 1, 1, 1, 1)
    seq_len = torch.tensor(seq_lens, dtype=torch.int32).view(b, 1, 1, 1)
    dims, strides = (b, h, s_max, d), (s_max * h * d, d, h * d, 1)

    def packed() -> Any:  # a buffer covering the declared extent, the T tokens at its start
        return torch.randn(b * s_max * h * d).as_strided(dims, strides)

    q_gpu, k_gpu, v_gpu, do_gpu = packed(), packed(), packed(), packed()
    o_gpu = torch.full((b * s_max * h * d,), float("nan")).as_strided(dims, strides)
    stats_gpu = torch.full((b * s_max * h,), float("nan")).as_strided((b, h, s_max, 1), (s_max * h, 1, h, 1))

    graph = cudnn.pygraph(
        io_data_type=cudnn.data_type.FLOAT,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    q, k, v = (graph.tensor_like(x) for x in (q_gpu, k_gpu, v_gpu))
    ragged = graph.tensor_like(offset)
    ragged_stats = graph.tensor_like(stats_offset)
    q.set_ragged_offset(ragged)
    k.set_ragged_offset(ragged)
    v.set_ragged_offset(ragged)
    sq, skv = graph.tensor_like(seq_len), graph.tensor_like(seq_len)
    o, stats = graph.sdpa(
        name="sdpa",
        q=q,
        k=k,
        v=v,
        is_inference=False,
        attn_scale=1.0 / math.sqrt(d),
        use_causal_mask=True,
        use_padding_mask=True,
        seq_len_q=sq,
        seq_len_kv=skv,
    )
    o.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(ragged)
    stats.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_stride([s_max * h, 1, h, 1])
    stats.set_ragged_offset(ragged_stats)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    pack = {q: q_gpu, k: k_gpu, v: v_gpu, o: o_gpu, stats: stats_gpu, ragged: offset, ragged_stats: stats_offset}
    pack.update({sq: seq_len, skv: seq_len})
    graph.execute(pack, torch.empty(graph.get_workspace_size(), dtype=torch.uint8))

    bwd = cudnn.pygraph(
        io_data_type=cudnn.data_type.FLOAT,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    tq, tk, tv, to, tdo = (bwd.tensor_like(x) for x in (q_gpu, k_gpu, v_gpu, o_gpu, do_gpu))
    tstats = bwd.tensor_like(stats_gpu)
    r, rs = bwd.tensor_like(offset), bwd.tensor_like(stats_offset)
    for x in (tq, tk, tv, to, tdo):
        x.set_ragged_offset(r)
    tstats.set_ragged_offset(rs)
    bsq, bskv = bwd.tensor_like(seq_len), bwd.tensor_like(seq_len)
    dq, dk, dv = bwd.sdpa_backward(
        q=tq,
        k=tk,
        v=tv,
        o=to,
        dO=tdo,
        stats=tstats,
        attn_scale=1.0 / math.sqrt(d),
        use_causal_mask=True,
        use_padding_mask=True,
        seq_len_q=bsq,
        seq_len_kv=bskv,
    )
    grads = [torch.full((b * s_max * h * d,), float("nan")).as_strided(dims, strides) for _ in range(3)]
    for x in (dq, dk, dv):
        x.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(r)
    bwd.validate()
    bwd.build_operation_graph()
    bwd.create_execution_plans([cudnn.heur_mode.A])
    bwd.check_support()
    bwd.build_plans()
    bpack = {tq: q_gpu, tk: k_gpu, tv: v_gpu, to: o_gpu, tdo: do_gpu, tstats: stats_gpu, r: offset, rs: stats_offset}
    bpack.update({bsq: seq_len, bskv: seq_len, dq: grads[0], dk: grads[1], dv: grads[2]})
    bwd.execute(bpack, torch.empty(bwd.get_workspace_size(), dtype=torch.uint8))
    cudnn.destroy_handle(handle)

    flat = lambda x: x.as_strided((b * s_max * h * d,), (1,))  # noqa: E731
    for i, n in enumerate(seq_lens):
        lo, hi = int(cu[i]) * h * d, int(cu[i + 1]) * h * d

        def per(x: Any, lo: int = lo, hi: int = hi, n: int = n) -> Any:
            return flat(x)[lo:hi].view(n, h, d).transpose(0, 1).double()

        qq, kk, vv = (per(x).requires_grad_() for x in (q_gpu, k_gpu, v_gpu))
        ref = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True, scale=1.0 / math.sqrt(d))
        torch.testing.assert_close(per(o_gpu), ref.detach(), atol=2e-6, rtol=1e-5)
        ref.backward(per(do_gpu))
        for got, want in zip(grads, (qq.grad, kk.grad, vv.grad)):
            torch.testing.assert_close(per(got), want, atol=2e-5, rtol=1e-4)
    assert torch.isnan(flat(o_gpu)[t * h * d :]).all(), "o written past the packed tokens"
    assert all(torch.isnan(flat(g)[t * h * d :]).all() for g in grads)
