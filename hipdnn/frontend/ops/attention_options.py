"""SDPA's options as one value, :class:`SdpaAttributes` (named after hipDNN's), shared by
``Graph.sdpa``, ``Graph.sdpa_backward``, both nodes and the wire mapping: the option list is spelled
here, once.

Forward and backward carry the same scale and mask options and both wire tables the same fields, so
the mapping lives here too. ``generate_stats`` and ``is_inference`` are the forward's alone,
``use_deterministic_algorithm`` the backward's.

cudnn-frontend's ``pygraph.sdpa`` / ``sdpa_backward`` take more keywords than hipdnn implements
(dropout, paged attention, sink tokens, ...). Code ported from it passes them at their "off" values,
which are accepted and change nothing; any other value is refused naming the feature
(:data:`CUDNN_FRONTEND_OPTIONS`, rfcs/0011-cudnn-frontend-compatibility.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hipdnn.backend.enums import NamedIntEnum
from hipdnn.frontend.args import (
    INT64_MAX,
    bool_arg,
    check_float,
    enum_arg,
    number_arg,
    optional_bool_arg,
    optional_int_arg,
    refuse,
    show,
)
from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import DataType, DiagonalAlignment, ErrorCode, HipdnnError


class AttentionImplementation(NamedIntEnum):
    """cudnn-frontend's ``attention_implementation`` (numbered as the wire schema numbers it). hipdnn
    chooses engines itself (``Graph(preferred_engine_id=...)`` names one): only AUTO is accepted."""

    AUTO = 0
    COMPOSITE = 1
    UNIFIED = 2


@dataclass
class SdpaAttributes:
    """Options of scaled dot-product attention, forward and backward::

        opts = hipdnn.SdpaAttributes(attn_scale=0.125, use_causal_mask=True)
        o, _ = g.sdpa(q, k, v, options=opts)
        dq, dk, dv = g.sdpa_backward(q, k, v, o, do, stats, options=opts)

    Keywords of ``sdpa``/``sdpa_backward`` are these fields; given together with ``options``, they
    override its fields for that call. Values are checked when the op is added, as keywords are.

    - ``attn_scale``: a number, or a one-element tensor given at execute (None: 1/sqrt(head dim)).
    - ``use_causal_mask`` with ``diagonal_alignment`` (TOP_LEFT, or BOTTOM_RIGHT when Sq != Skv);
      ``use_causal_mask_bottom_right`` is cudnn-frontend's spelling of causal + BOTTOM_RIGHT.
    - ``diagonal_band_left_bound`` / ``diagonal_band_right_bound``: a sliding window around the
      diagonal (None: unbounded).
    - ``use_padding_mask`` with ``seq_len_q`` and ``seq_len_kv`` tensors [B, 1, 1, 1].
    - ``bias``: an additive tensor that broadcasts to the scores [B, Hq, Sq, Skv]; ``use_alibi_mask``.
    - ``generate_stats`` / ``is_inference`` (forward only): also output the row log-sum-exp that the
      backward needs (cudnn-frontend's ``is_inference=False`` means the same).
    - ``softcap``: score softcapping (Gemma 2's ``attn_logit_softcapping``, FlashAttention's
      ``softcap``). With c > 0, the score s = attn_scale * q.k is replaced by c * tanh(s / c) BEFORE
      the additive bias, ALiBi and every mask are applied (Gemma 2's order in transformers: softcap
      the scaled logits, then add the mask). The backward multiplies dS by 1 - tanh(s / c)^2 for the
      capped score (ds_raw = ds_capped * (1 - t^2), t = tanh(s / c)). None or 0 means off; a negative,
      NaN or infinite c is refused at validation. Graphs with it need plugin API 1.4.0
      (rfcs/0013-softcap.md).
    - ``use_deterministic_algorithm`` (backward only): the same inputs give bit-identical gradients;
      engines that cannot promise it decline the graph (the GPU engine sums dQ in no fixed order, the
      CPU engine's backward is deterministic). Ignored by the forward when it comes in ``options``.

    - ``paged_attention_k_table`` / ``paged_attention_v_table`` (forward only): INT32 page tables
      ``[B, 1, max_blocks, 1]``; k and v are then caches ``[num_blocks, Hk, block_size, D]`` and key
      ``j`` of batch ``b`` is slot ``j % block_size`` of block ``table[b, j // block_size]``; needs the
      padding mask (``seq_len_kv`` gives each sequence's key count). ``paged_attention_max_seq_len_kv``
      is the effective Skv (default ``max_blocks * block_size``). rfcs/0012-ragged-and-paged.md.

    cudnn-frontend's other SDPA keywords (``dropout=None``, ``block_mask=None``,
    ``sink_token=None``, ``implementation=AUTO``, ...) are accepted as keywords of ``sdpa`` /
    ``sdpa_backward`` at their off values; ``sliding_window_length`` is its older name for
    ``diagonal_band_left_bound``.

    Dropout, which the wire schema has fields for, is not offered: no engine implements it, and an
    engine ignoring a dropout field would return undropped results silently."""

    attn_scale: float | TensorAttributes | None = None
    use_causal_mask: bool = False
    use_causal_mask_bottom_right: bool = False
    diagonal_alignment: DiagonalAlignment = DiagonalAlignment.TOP_LEFT
    diagonal_band_left_bound: int | None = None
    diagonal_band_right_bound: int | None = None
    use_padding_mask: bool = False
    seq_len_q: TensorAttributes | None = None
    seq_len_kv: TensorAttributes | None = None
    bias: TensorAttributes | None = None
    use_alibi_mask: bool = False
    generate_stats: bool | None = None
    is_inference: bool | None = None
    use_deterministic_algorithm: bool = False
    paged_attention_k_table: TensorAttributes | None = None
    paged_attention_v_table: TensorAttributes | None = None
    paged_attention_max_seq_len_kv: int | None = None
    softcap: float | None = None

    def checked(self, at: str) -> SdpaAttributes:
        """A checked, normalized copy (``at`` prefixes messages): arguments of the right types, the
        bottom-right causal spelling folded into ``use_causal_mask`` + BOTTOM_RIGHT. Option tensors
        are the graph's to check (they must be its own)."""
        scale = self.attn_scale
        if scale is not None and not isinstance(scale, TensorAttributes):
            scale = number_arg(scale, at + "attn_scale")
        softcap = None if self.softcap is None else number_arg(self.softcap, at + "softcap")
        out = dataclasses.replace(
            self,
            attn_scale=scale,
            # 0 is "off", as None: one spelling on the wire (the field unwritten) and when read back
            softcap=softcap if softcap != 0.0 else None,
            use_causal_mask=bool_arg(self.use_causal_mask, at + "use_causal_mask"),
            use_causal_mask_bottom_right=bool_arg(
                self.use_causal_mask_bottom_right, at + "use_causal_mask_bottom_right"
            ),
            diagonal_alignment=enum_arg(DiagonalAlignment, self.diagonal_alignment, at + "diagonal_alignment"),
            diagonal_band_left_bound=optional_int_arg(self.diagonal_band_left_bound, at + "diagonal_band_left_bound"),
            diagonal_band_right_bound=optional_int_arg(
                self.diagonal_band_right_bound, at + "diagonal_band_right_bound"
            ),
            use_padding_mask=bool_arg(self.use_padding_mask, at + "use_padding_mask"),
            use_alibi_mask=bool_arg(self.use_alibi_mask, at + "use_alibi_mask"),
            generate_stats=optional_bool_arg(self.generate_stats, at + "generate_stats"),
            is_inference=optional_bool_arg(self.is_inference, at + "is_inference"),
            use_deterministic_algorithm=bool_arg(self.use_deterministic_algorithm, at + "use_deterministic_algorithm"),
            paged_attention_max_seq_len_kv=optional_int_arg(
                self.paged_attention_max_seq_len_kv, at + "paged_attention_max_seq_len_kv"
            ),
        )
        for role in ("paged_attention_k_table", "paged_attention_v_table"):
            table = getattr(out, role)
            if table is not None and not isinstance(table, TensorAttributes):
                raise refuse(at + role, f"must be a tensor or None, not {type(table).__name__}")
        if out.use_causal_mask_bottom_right:
            out.use_causal_mask, out.diagonal_alignment = True, DiagonalAlignment.BOTTOM_RIGHT
            out.use_causal_mask_bottom_right = False
        gs, inf = out.generate_stats, out.is_inference
        if gs is not None and inf is not None and gs == inf:
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"{at}generate_stats and is_inference contradict each other")
        return out

    def for_op(self, kind: str) -> SdpaAttributes:
        """A copy for op ``kind`` ("sdpa" or "sdpa_backward"): the fields of the other direction
        (:data:`ONE_DIRECTION_OPTIONS`) back at their defaults, as one options object serves both."""
        defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(self)}
        return dataclasses.replace(
            self, **{name: defaults[name] for name, ops in ONE_DIRECTION_OPTIONS.items() if kind not in ops}
        )

    @property
    def stats_wanted(self) -> bool:
        """Whether the forward outputs stats (generate_stats, or cudnn-frontend's is_inference=False)."""
        return bool(self.generate_stats) if self.generate_stats is not None else self.is_inference is False

    def tensors(self) -> list[tuple[str, TensorAttributes]]:
        """The option tensors, by role (the scale's when it is one)."""
        roles = [
            ("seq_len_q", self.seq_len_q),
            ("seq_len_kv", self.seq_len_kv),
            ("bias", self.bias),
            ("paged_attention_k_table", self.paged_attention_k_table),
            ("paged_attention_v_table", self.paged_attention_v_table),
        ]
        if isinstance(self.attn_scale, TensorAttributes):
            roles.append(("attn_scale", self.attn_scale))
        return [(role, t) for role, t in roles if t is not None]


#: the option names (the keywords Graph.sdpa and Graph.sdpa_backward take besides tensors)
SDPA_OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SdpaAttributes))

_FWD, _BWD = frozenset({"sdpa"}), frozenset({"sdpa_backward"})
_BOTH = _FWD | _BWD
#: options of one direction only, as cudnn-frontend has them; the other direction refuses them as keywords
ONE_DIRECTION_OPTIONS: dict[str, frozenset[str]] = {
    "generate_stats": _FWD,
    "is_inference": _FWD,
    "use_deterministic_algorithm": _BWD,
    # cudnn-frontend serves paged K/V in the forward only
    "paged_attention_k_table": _FWD,
    "paged_attention_v_table": _FWD,
    "paged_attention_max_seq_len_kv": _FWD,
}


@dataclass(frozen=True)
class ForeignOption:
    """A keyword of cudnn-frontend's ``pygraph.sdpa`` / ``sdpa_backward`` for a feature hipdnn lacks:
    accepted at its off value (``off``: None, False or AUTO, cudnn-frontend's default), refused
    otherwise with ``feature`` in the message."""

    feature: str
    off: object
    ops: frozenset[str]

    def is_off(self, value: object) -> bool:
        if self.off is AttentionImplementation.AUTO:
            # None too: a port that forwards ``implementation=None`` means "not chosen"
            return value is None or (isinstance(value, AttentionImplementation) and value is self.off)
        return value is self.off


#: cudnn-frontend's SDPA keywords (python/pygraph/sdpa.cpp) that name features hipdnn does not
#: implement, by keyword. ``sliding_window_length`` is not here: it is an alias (of
#: ``diagonal_band_left_bound``), served.
CUDNN_FRONTEND_OPTIONS: dict[str, ForeignOption] = {
    "dropout": ForeignOption("dropout", None, _BOTH),
    "rng_dump": ForeignOption("dumping the dropout RNG mask (rng_dump)", None, _BOTH),
    "max_total_seq_len_q": ForeignOption("ragged (packed) Q layouts", None, _BOTH),
    "max_total_seq_len_kv": ForeignOption("ragged (packed) K/V layouts", None, _BOTH),
    "cu_seq_len_q": ForeignOption("cumulative (ragged) query sequence lengths", None, _FWD),
    "cu_seq_len_kv": ForeignOption("cumulative (ragged) key/value sequence lengths", None, _FWD),
    "block_mask": ForeignOption("block-sparse masks (block_mask)", None, _FWD),
    "score_mod": ForeignOption("score modification callbacks (score_mod)", None, _BOTH),
    "score_mod_bprop": ForeignOption("score modification callbacks (score_mod_bprop)", None, _BWD),
    "score_max": ForeignOption("the row-max output (score_max)", None, _FWD),
    "score_sum_exp": ForeignOption("the row sum-of-exponents output (score_sum_exp)", None, _FWD),
    "sink_token": ForeignOption("attention sink tokens (sink_token)", None, _BOTH),
    "dSink_token": ForeignOption("the sink-token gradient (dSink_token)", None, _BWD),
    "dBias": ForeignOption("a bias gradient (dBias)", None, _BWD),
    "unfuse_fma": ForeignOption("unfused softmax arithmetic (unfuse_fma, an SM100 cuDNN switch)", False, _FWD),
    "stats_use_log2": ForeignOption("base-2 stats (stats_use_log2; hipdnn's stats are natural-log)", False, _FWD),
    "implementation": ForeignOption(
        "choosing cuDNN's SDPA implementation (hipdnn chooses engines itself; "
        "Graph(preferred_engine_id=...) names one)",
        AttentionImplementation.AUTO,
        _FWD,
    ),
}

_OTHER = {"sdpa": "sdpa_backward", "sdpa_backward": "sdpa"}


def _off_text(option: ForeignOption) -> str:
    off = option.off
    return "AttentionImplementation.AUTO" if off is AttentionImplementation.AUTO else repr(off)


def cudnn_keywords(keywords: Mapping[str, Any], kind: str, what: str) -> dict[str, Any]:
    """``keywords`` with cudnn-frontend's spellings resolved for op ``kind`` ("sdpa" or
    "sdpa_backward"): its unimplemented features dropped at their off values (refused, naming the
    feature, at any other), ``sliding_window_length`` renamed ``diagonal_band_left_bound``, and the
    options of the other direction refused as that direction's."""
    out: dict[str, Any] = {}
    for name, value in keywords.items():
        option = CUDNN_FRONTEND_OPTIONS.get(name)
        ops = option.ops if option is not None else ONE_DIRECTION_OPTIONS.get(name, _BOTH)
        if kind not in ops:
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"{what}: {name} is an option of {_OTHER[kind]}, not of {kind}")
        if option is None:
            out[name] = value
        elif not option.is_off(value):
            shown = f"tensor {value.get_name()!r}" if isinstance(value, TensorAttributes) else show(value)
            raise HipdnnError(
                ErrorCode.GRAPH_NOT_SUPPORTED,
                f"{what}: {name}={shown} asks for {option.feature}, which hipdnn does not support; "
                f"leave {name} out or pass {_off_text(option)} (cudnn-frontend's default)",
            )
    window = keywords.get("sliding_window_length")
    if "sliding_window_length" in keywords:
        del out["sliding_window_length"]
        if window is not None:
            if keywords.get("diagonal_band_left_bound") is not None:
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE,
                    f"{what}: sliding_window_length and diagonal_band_left_bound are both set; give one "
                    "(sliding_window_length is cudnn-frontend's older name for the left bound)",
                )
            out["diagonal_band_left_bound"] = window
    return out


def options_from(
    options: SdpaAttributes | None, keywords: Mapping[str, Any], what: str, kind: str = "sdpa"
) -> SdpaAttributes:
    """The options of one call of op ``kind``: ``options`` (or the defaults) with ``keywords``
    overriding its fields. cudnn-frontend's keywords are resolved first (:func:`cudnn_keywords`);
    an unknown keyword names itself and the known ones."""
    if options is not None and not isinstance(options, SdpaAttributes):
        raise refuse(f"{what}: options", f"must be a hipdnn.SdpaAttributes, not {type(options).__name__}")
    keywords = cudnn_keywords(keywords, kind, what)
    unknown = sorted(set(keywords) - set(SDPA_OPTION_NAMES))
    if unknown:
        raise HipdnnError(
            ErrorCode.INVALID_VALUE,
            f"{what}: unknown option(s) {', '.join(unknown)}; SdpaAttributes has {', '.join(SDPA_OPTION_NAMES)}"
            " (and cudnn-frontend's keywords at their off values)",
        )
    return dataclasses.replace(options or SdpaAttributes(), **keywords)


def _uid(t: TensorAttributes | None) -> int | None:
    return t.get_uid() if t is not None else None


def write_options(options: SdpaAttributes, table: Any) -> None:
    """Copy the scale and mask options onto a node's wire table (object API)."""
    if isinstance(options.attn_scale, TensorAttributes):
        table.scaleTensorUid = options.attn_scale.get_uid()
    elif options.attn_scale is not None:
        table.attnScaleValue = float(options.attn_scale)
    # The wire format has one causal flag per alignment; set together they would intersect.
    bottom_right = options.diagonal_alignment == DiagonalAlignment.BOTTOM_RIGHT
    table.causalMask = options.use_causal_mask and not bottom_right
    table.causalMaskBottomRight = options.use_causal_mask and bottom_right
    table.diagonalAlignment = int(options.diagonal_alignment)
    table.leftBound = options.diagonal_band_left_bound
    table.rightBound = options.diagonal_band_right_bound
    table.paddingMask = options.use_padding_mask
    table.seqLenQTensorUid = _uid(options.seq_len_q)
    table.seqLenKvTensorUid = _uid(options.seq_len_kv)
    table.attnMaskTensorUid = _uid(options.bias)
    table.alibiMask = options.use_alibi_mask
    if options.softcap is not None:
        table.softcap = float(options.softcap)
    if options.paged_attention_k_table is not None or options.paged_attention_v_table is not None:
        table.pageTableKTensorUid = _uid(options.paged_attention_k_table)
        table.pageTableVTensorUid = _uid(options.paged_attention_v_table)
        table.maxSeqLenKv = options.paged_attention_max_seq_len_kv


def write_backward_options(options: SdpaAttributes, table: Any) -> None:
    """The backward's wire table: the shared options, and its own (deterministic)."""
    write_options(options, table)
    table.deterministic = options.use_deterministic_algorithm


def read_backward_options(table: Any, tensor: Callable[[int | None], Any]) -> SdpaAttributes:
    """The backward's options, read back from its wire table."""
    return dataclasses.replace(read_options(table, tensor), use_deterministic_algorithm=bool(table.deterministic))


def read_options(table: Any, tensor: Callable[[int | None], Any]) -> SdpaAttributes:
    """The scale and mask options, read back from a wire table."""
    alignment = DiagonalAlignment(table.diagonalAlignment)
    if table.causalMaskBottomRight:
        alignment = DiagonalAlignment.BOTTOM_RIGHT
    scale: float | TensorAttributes | None = tensor(table.scaleTensorUid)
    if scale is None and table.attnScaleValue is not None:
        scale = float(table.attnScaleValue)
    return SdpaAttributes(
        attn_scale=scale,
        use_causal_mask=bool(table.causalMask or table.causalMaskBottomRight),
        diagonal_alignment=alignment,
        diagonal_band_left_bound=table.leftBound,
        diagonal_band_right_bound=table.rightBound,
        use_padding_mask=bool(table.paddingMask),
        seq_len_q=tensor(table.seqLenQTensorUid),
        seq_len_kv=tensor(table.seqLenKvTensorUid),
        bias=tensor(table.attnMaskTensorUid),
        use_alibi_mask=bool(table.alibiMask),
        paged_attention_k_table=tensor(getattr(table, "pageTableKTensorUid", None)),
        paged_attention_v_table=tensor(getattr(table, "pageTableVTensorUid", None)),
        paged_attention_max_seq_len_kv=getattr(table, "maxSeqLenKv", None),
        # 0 (the default: unwritten) is off; any other value, NaN or negative too, is kept for
        # check_options to refuse
        softcap=float(table.softcap) if table.softcap != 0.0 else None,
    )


def check_options(node: Any, q: TensorAttributes, k: TensorAttributes) -> None:
    """Rules on the options shared by SDPA forward and backward; raises through ``node.fail``.

    The option tensors must fit the attention they modify: a scale tensor holds one value, sequence
    lengths are [B, 1, 1, 1], and a bias broadcasts to the scores [B, Hq, Sq, Skv] (each dim equal or 1).
    Shape relations are skipped when a tensor involved is dynamic (spec 6.5)."""
    opts: SdpaAttributes = node.options
    if isinstance(opts.attn_scale, float):
        check_float(opts.attn_scale, f"{node.kind} node {node.name!r}: attn_scale")
    check_softcap(node, opts.softcap)
    for role, bound in (("left", opts.diagonal_band_left_bound), ("right", opts.diagonal_band_right_bound)):
        if bound is not None and bound < 0:
            raise node.fail(f"diagonal_band_{role}_bound {bound} must be >= 0")
        if bound is not None and bound > INT64_MAX:
            raise node.fail(f"diagonal_band_{role}_bound {bound} is outside the int64 range the wire format stores")
    if opts.use_padding_mask and (opts.seq_len_q is None or opts.seq_len_kv is None):
        raise node.fail("use_padding_mask needs seq_len_q and seq_len_kv tensors")
    b, hq, sq, _ = q.get_dim()
    skv = k.get_dim()[2]
    if is_paged(opts):
        skv = check_paged(node, q, k, node.v)
    scale = opts.attn_scale
    if isinstance(scale, TensorAttributes) and not scale.is_dynamic() and any(d != 1 for d in scale.get_dim()):
        raise node.fail(f"attn_scale tensor {scale.get_name()!r} must hold one value, has dims {scale.get_dim()}")
    for role, t in (("seq_len_q", opts.seq_len_q), ("seq_len_kv", opts.seq_len_kv)):
        if t is None or t.is_dynamic() or q.is_dynamic():
            continue
        if t.get_dim() != [b, 1, 1, 1]:
            raise node.fail(f"{role} tensor {t.get_name()!r} must have dims [{b}, 1, 1, 1], has {t.get_dim()}")
    bias = opts.bias
    if bias is not None and not (bias.is_dynamic() or q.is_dynamic() or k.is_dynamic()):
        scores = [b, hq, sq, skv]
        dims = bias.get_dim()
        if len(dims) != 4 or any(d not in (1, s) for d, s in zip(dims, scores)):
            raise node.fail(
                f"bias tensor {bias.get_name()!r} with dims {dims} does not broadcast to the scores {scores}"
            )


def check_softcap(node: Any, softcap: float | None) -> None:
    """Rules of ``softcap``: None (off) or a finite c > 0 that float32 holds (the wire stores it as
    float32, where a tiny c would arrive as 0, i.e. off, and a huge one as inf)."""
    if softcap is None:
        return
    what = f"{node.kind} node {node.name!r}: softcap"
    check_float(softcap, what)
    if softcap < 0:
        raise refuse(what, f"{softcap} is negative: it must be > 0 (the cap c of c * tanh(s / c)), or 0 / None: off")
    if softcap != 0.0 and float(np.float32(softcap)) == 0.0:
        raise refuse(what, f"{softcap} rounds to 0 in float32, which the wire format stores (it would mean off)")


_INT32_MAX = 2**31 - 1
_INDEX_TYPES = (DataType.INT32, DataType.INT64)


def is_paged(opts: SdpaAttributes) -> bool:
    """Whether the options page K/V (either table given; check_paged refuses one without the other)."""
    return opts.paged_attention_k_table is not None or opts.paged_attention_v_table is not None


def check_paged(node: Any, q: TensorAttributes, k: TensorAttributes, v: TensorAttributes) -> int:
    """Rules of paged K/V (rfcs/0012); returns the effective Skv. k and v are caches
    ``[num_blocks, Hk, block_size, D]``, the tables INT32 ``[B, 1, max_blocks, 1]``."""
    opts: SdpaAttributes = node.options
    kt, vt = opts.paged_attention_k_table, opts.paged_attention_v_table
    if kt is None or vt is None:
        raise node.fail(
            "paged attention needs both paged_attention_k_table and paged_attention_v_table "
            "(hipdnn pages K and V together)"
        )
    if not opts.use_padding_mask or opts.seq_len_kv is None:
        raise node.fail("paged attention needs the padding mask: seq_len_kv gives each sequence's key count")
    for role, t in (("q", q), ("k", k), ("v", v), ("paged_attention_k_table", kt), ("paged_attention_v_table", vt)):
        if t.is_dynamic():
            raise node.fail(f"{role} tensor {t.get_name()!r} is dynamic; paged attention needs static tensors")
    b = q.get_dim()[0]
    caps = []
    for role, table, cache in (("paged_attention_k_table", kt, k), ("paged_attention_v_table", vt, v)):
        if table.get_data_type() != DataType.INT32:
            raise node.fail(f"{role} tensor {table.get_name()!r} must be INT32, is {table.get_data_type()}")
        dims = table.get_dim()
        if len(dims) != 4 or dims[0] != b or dims[1] != 1 or dims[3] != 1:
            raise node.fail(
                f"{role} tensor {table.get_name()!r} must have dims [{b}, 1, max_blocks, 1] (B = q's batch), has {dims}"
            )
        caps.append(dims[2] * cache.get_dim()[2])
    limit = opts.paged_attention_max_seq_len_kv
    if limit is None:
        skv = caps[0]
        if caps[1] < skv:
            raise node.fail(
                f"the V page table covers {caps[1]} keys (max_blocks x block_size), fewer than the K table's "
                f"{skv}; give paged_attention_max_seq_len_kv"
            )
        return skv
    if not 1 <= limit <= min(min(caps), _INT32_MAX):
        raise node.fail(
            f"paged_attention_max_seq_len_kv {limit} must be in [1, {min(caps)}] "
            "(max_blocks x block_size of the K and V tables)"
        )
    return limit


def check_ragged(node: Any, roles: Sequence[tuple[str, TensorAttributes | None]]) -> None:
    """Rules of ragged offsets on an SDPA node's tensors (rfcs/0012): the offset tensor is INT32 or
    INT64 [B + 1, 1, 1, 1], static and given at execute; the ragged tensor is a static input or
    output (not an intermediate); the node has the padding mask, whose lengths say how many rows of
    each sequence there are."""
    opts: SdpaAttributes = node.options
    for role, t in roles:
        if t is None or t.get_ragged_offset() is None:
            continue
        off = t.get_ragged_offset()
        assert off is not None
        what = f"{role} tensor {t.get_name()!r} (ragged offset {off.get_name()!r})"
        if role in ("k", "v") and is_paged(opts):
            raise node.fail(f"{what}: a paged K/V cache cannot also be ragged")
        if not opts.use_padding_mask:
            raise node.fail(f"{what}: ragged tensors need the padding mask (seq_len_q / seq_len_kv give the lengths)")
        if t.is_dynamic() or off.is_dynamic():
            raise node.fail(f"{what}: ragged tensors and their offsets must be static")
        if t.get_is_virtual():
            raise node.fail(f"{what}: an intermediate cannot be ragged; mark it set_output(True)")
        if off.get_is_virtual():
            raise node.fail(f"{what}: the offset tensor must be given at execute, not be an intermediate")
        if off.get_data_type() not in _INDEX_TYPES:
            raise node.fail(f"{what}: the offset tensor must be INT32 or INT64, is {off.get_data_type()}")
        b = t.get_dim()[0]
        dims = off.get_dim()
        if not dims or dims[0] != b + 1 or any(d != 1 for d in dims[1:]):
            raise node.fail(f"{what}: the offset tensor must have dims [{b + 1}, 1, 1, 1] (B + 1), has {dims}")
