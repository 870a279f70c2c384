from .attribution_posterior_linear_operator import AttributionPosteriorLinearOperator
from .block_posterior_linear_operator import BlockPosteriorLinearOperator
from .low_rank_hadamard_linear_operator import LowRankHadamardLinearOperator
from .weight_posterior_linear_operator import WeightPosteriorLinearOperator

__all__ = [
    "AttributionPosteriorLinearOperator",
    "BlockPosteriorLinearOperator",
    "LowRankHadamardLinearOperator",
    "WeightPosteriorLinearOperator",
]
