from .heuristics import median_heuristic_lengthscale
from .validation import check_matrix, check_same_rows, check_vector

__all__ = ["check_matrix", "check_same_rows", "check_vector", "median_heuristic_lengthscale"]
