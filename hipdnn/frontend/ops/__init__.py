"""One module per operation; importing this package registers them all."""

from hipdnn.frontend.ops.base import OPERATIONS, Operation
from hipdnn.frontend.ops.matmul import MatmulNode
from hipdnn.frontend.ops.pointwise import PointwiseNode
from hipdnn.frontend.ops.sdpa import SdpaNode

__all__ = ["OPERATIONS", "MatmulNode", "Operation", "PointwiseNode", "SdpaNode"]
