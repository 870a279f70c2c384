from .attribution_posterior_linear_operator import AttributionPosteriorLinearOperator
from .block_posterior_linear_operator import BlockPosteriorLinearOperator
from .feature_scaled_linear_operator import FeatureScaledLinearOperator
from .gpx_inducing_linear_operator import GPXInducingLinearOperator
from .inducing_weight_posterior_linear_operator import InducingWeightPosteriorLinearOperator
from .low_rank_hadamard_linear_operator import LowRankHadamardLinearOperator
from .partitioned_kernel_linear_operator import PartitionedKernelLinearOperator
from .weight_posterior_linear_operator import WeightPosteriorLinearOperator

__all__ = [
    "AttributionPosteriorLinearOperator",
    "BlockPosteriorLinearOperator",
    "FeatureScaledLinearOperator",
    "GPXInducingLinearOperator",
    "InducingWeightPosteriorLinearOperator",
    "LowRankHadamardLinearOperator",
    "PartitionedKernelLinearOperator",
    "WeightPosteriorLinearOperator",
]
