"""One module per operation; importing this package registers them all."""

from hipdnn.frontend.ops.base import OPERATIONS, Operation
from hipdnn.frontend.ops.matmul import MatmulNode
from hipdnn.frontend.ops.norms import LayerNormNode, RMSNormNode
from hipdnn.frontend.ops.pointwise import PointwiseNode
from hipdnn.frontend.ops.reduction import ReductionNode
from hipdnn.frontend.ops.sdpa import SdpaNode
from hipdnn.frontend.ops.sdpa_backward import SdpaBackwardNode

__all__ = [
    "OPERATIONS",
    "LayerNormNode",
    "MatmulNode",
    "Operation",
    "PointwiseNode",
    "RMSNormNode",
    "ReductionNode",
    "SdpaBackwardNode",
    "SdpaNode",
]
