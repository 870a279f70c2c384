from .dense_path import dense_cholesky, dense_fits, dense_path_bytes, uses_dense_path
from .gp import ensure_prediction_strategy, kernel_diag
from .heuristics import median_heuristic_lengthscale
from .linalg import (
    dense_gaussian_nll,
    dense_limit,
    kron_identity,
    shared_matrix,
    solve_checked,
    solve_triangular_shared,
)
from .memory import available_memory, check_memory
from .validation import check_feature_names, check_matrix, check_same_rows, check_vector

__all__ = [
    "available_memory",
    "check_memory",
    "check_feature_names",
    "check_matrix",
    "check_same_rows",
    "check_vector",
    "dense_cholesky",
    "dense_fits",
    "dense_gaussian_nll",
    "dense_limit",
    "dense_path_bytes",
    "ensure_prediction_strategy",
    "kernel_diag",
    "kron_identity",
    "median_heuristic_lengthscale",
    "shared_matrix",
    "solve_checked",
    "solve_triangular_shared",
    "uses_dense_path",
]
