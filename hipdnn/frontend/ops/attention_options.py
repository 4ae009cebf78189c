"""SDPA's options as one value, :class:`SdpaAttributes` (named after hipDNN's), shared by
``Graph.sdpa``, ``Graph.sdpa_backward``, both nodes and the wire mapping: the option list is spelled
here, once.

Forward and backward carry the same scale and mask options and both wire tables the same fields, so
the mapping lives here too. ``generate_stats`` and ``is_inference`` are the forward's alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hipdnn.frontend.args import (
    INT64_MAX,
    bool_arg,
    check_float,
    enum_arg,
    number_arg,
    optional_bool_arg,
    optional_int_arg,
    refuse,
)
from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import DiagonalAlignment, ErrorCode, HipdnnError


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

    def checked(self, at: str) -> SdpaAttributes:
        """A checked, normalized copy (``at`` prefixes messages): arguments of the right types, the
        bottom-right causal spelling folded into ``use_causal_mask`` + BOTTOM_RIGHT. Option tensors
        are the graph's to check (they must be its own)."""
        scale = self.attn_scale
        if scale is not None and not isinstance(scale, TensorAttributes):
            scale = number_arg(scale, at + "attn_scale")
        out = dataclasses.replace(
            self,
            attn_scale=scale,
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
        )
        if out.use_causal_mask_bottom_right:
            out.use_causal_mask, out.diagonal_alignment = True, DiagonalAlignment.BOTTOM_RIGHT
            out.use_causal_mask_bottom_right = False
        gs, inf = out.generate_stats, out.is_inference
        if gs is not None and inf is not None and gs == inf:
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"{at}generate_stats and is_inference contradict each other")
        return out

    @property
    def stats_wanted(self) -> bool:
        """Whether the forward outputs stats (generate_stats, or cudnn-frontend's is_inference=False)."""
        return bool(self.generate_stats) if self.generate_stats is not None else self.is_inference is False

    def tensors(self) -> list[tuple[str, TensorAttributes]]:
        """The option tensors, by role (the scale's when it is one)."""
        roles = [("seq_len_q", self.seq_len_q), ("seq_len_kv", self.seq_len_kv), ("bias", self.bias)]
        if isinstance(self.attn_scale, TensorAttributes):
            roles.append(("attn_scale", self.attn_scale))
        return [(role, t) for role, t in roles if t is not None]


#: the option names (the keywords Graph.sdpa and Graph.sdpa_backward take besides tensors)
SDPA_OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SdpaAttributes))


def options_from(options: SdpaAttributes | None, keywords: Mapping[str, Any], what: str) -> SdpaAttributes:
    """The options of one call: ``options`` (or the defaults) with ``keywords`` overriding its fields.
    An unknown keyword names itself and the known ones."""
    if options is not None and not isinstance(options, SdpaAttributes):
        raise refuse(f"{what}: options", f"must be a hipdnn.SdpaAttributes, not {type(options).__name__}")
    unknown = sorted(set(keywords) - set(SDPA_OPTION_NAMES))
    if unknown:
        raise HipdnnError(
            ErrorCode.INVALID_VALUE,
            f"{what}: unknown option(s) {', '.join(unknown)}; SdpaAttributes has {', '.join(SDPA_OPTION_NAMES)}",
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
    )


def check_options(node: Any, q: TensorAttributes, k: TensorAttributes) -> None:
    """Rules on the options shared by SDPA forward and backward; raises through ``node.fail``.

    The option tensors must fit the attention they modify: a scale tensor holds one value, sequence
    lengths are [B, 1, 1, 1], and a bias broadcasts to the scores [B, Hq, Sq, Skv] (each dim equal or 1).
    Shape relations are skipped when a tensor involved is dynamic (spec 6.5)."""
    opts: SdpaAttributes = node.options
    if isinstance(opts.attn_scale, float):
        check_float(opts.attn_scale, f"{node.kind} node {node.name!r}: attn_scale")
    for role, bound in (("left", opts.diagonal_band_left_bound), ("right", opts.diagonal_band_right_bound)):
        if bound is not None and bound < 0:
            raise node.fail(f"diagonal_band_{role}_bound {bound} must be >= 0")
        if bound is not None and bound > INT64_MAX:
            raise node.fail(f"diagonal_band_{role}_bound {bound} is outside the int64 range the wire format stores")
    if opts.use_padding_mask and (opts.seq_len_q is None or opts.seq_len_kv is None):
        raise node.fail("use_padding_mask needs seq_len_q and seq_len_kv tensors")
    b, hq, sq, _ = q.get_dim()
    skv = k.get_dim()[2]
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
