#!/usr/bin/env python3
r"""Exact low-rank features of KISS-GP kernels: :math:`\mathbf K_{\mathrm{SKI}} = \boldsymbol\Phi\boldsymbol\Phi^\top`.

GPyTorch's KISS-GP (``GridInterpolationKernel``) is the structured kernel interpolation

.. math::

    \mathbf K_{\mathrm{SKI}}(\mathbf X_1, \mathbf X_2) = \mathbf W_1 \mathbf K_{UU} \mathbf W_2^\top,
    \qquad \mathbf K_{UU} = \mathbf K^{(1)} \otimes \cdots \otimes \mathbf K^{(D)},

with sparse cubic interpolation weights :math:`\mathbf W` (:math:`4^D` per row) and a Kronecker
product of one-dimensional grid Grams. With the eigendecompositions
:math:`\mathbf K^{(j)} = \mathbf Q^{(j)}\boldsymbol\Lambda^{(j)}\mathbf Q^{(j)\top}`, the eigenpairs of
:math:`\mathbf K_{UU}` are the Kronecker products of the factors' eigenpairs; keeping those whose
eigenvalue exceeds :class:`gpytorch_explain.settings.grid_root_tolerance` times the largest gives a
root :math:`\mathbf K_{UU} \approx \mathbf S\mathbf S^\top` (``G x r``, usually :math:`r \ll G`: the
eigenvalues of a smooth kernel on a grid decay fast), and

.. math::

    \boldsymbol\Phi = \mathbf W \mathbf S \quad (n \times r), \qquad
    \mathbf K_{\mathrm{SKI}} = \boldsymbol\Phi_1 \boldsymbol\Phi_2^\top

up to the dropped eigenvalues (each entry changes by at most the tolerance times
:math:`\lambda_{\max}`). ``ScaleKernel`` multiplies :math:`\boldsymbol\Phi` by the square root of
its output scale, and ``AdditiveStructureKernel`` over a one-dimensional grid concatenates the
features of its dimensions. ``ProductStructureKernel`` over a one-dimensional grid is, by the face-splitting
identity :math:`\bigodot_j \mathbf W_j\mathbf A\mathbf W_j^\top = (\mathbf W_1\bullet\cdots\bullet\mathbf W_D)
(\mathbf A\otimes\cdots\otimes\mathbf A)(\mathbf W_1\bullet\cdots\bullet\mathbf W_D)^\top`, a KISS-GP on the
:math:`D`-dimensional product grid: its features are the row-wise products of the per-dimension interpolated
columns of the kept Kronecker eigenpairs (GPyTorch's own operator multiplies Lanczos roots instead, and
linear_operator 0.6 pads an odd number of them wrongly above ``max_cholesky_size``).

GPX then solves :math:`\mathbf C` exactly by Woodbury, as with an
inducing-point base (:class:`~gpytorch_explain.operators.GPXInducingLinearOperator`), instead of
running CG through the interpolated operator.

The Kronecker factors are ordered like the interpolation's flat grid index (the last dimension varies
fastest). GPyTorch's own ``GridKernel`` (gpytorch 1.15.2) multiplies them the other way round, so for two or
more dimensions whose grids or lengthscales differ its KISS-GP is not the interpolation of its base kernel;
these features are.

The root is differentiable in the kernel hyperparameters (through ``torch.linalg.eigh`` of the
small factors); the interpolation weights are GPyTorch's own.
"""

from __future__ import annotations

import warnings

import torch
from gpytorch.kernels import (
    AdditiveStructureKernel,
    GridInterpolationKernel,
    Kernel,
    ProductStructureKernel,
    ScaleKernel,
)
from gpytorch.utils.grid import create_grid
from gpytorch.utils.interpolation import Interpolation
from linear_operator import to_dense
from linear_operator.operators import (
    KroneckerProductLinearOperator,
    LinearOperator,
    to_linear_operator,
)
from torch import Tensor

from .. import settings as explain_settings
from ..operators.grid_interpolated_linear_operator import _GridInterpolatedLinearOperator, _interp_times

__all__ = ["cover_grid", "fit_grid", "grid_features", "grid_operator", "supports_grid_features"]


def _plain(kernel: Kernel) -> bool:
    return kernel.active_dims is None and len(kernel.batch_shape) == 0


def _grid_kernel(kernel: Kernel) -> GridInterpolationKernel | None:
    """The ``GridInterpolationKernel`` in a supported structure, or ``None``."""
    while type(kernel) is ScaleKernel and _plain(kernel):
        kernel = kernel.base_kernel
    if type(kernel) in (AdditiveStructureKernel, ProductStructureKernel) and _plain(kernel):
        inner = kernel.base_kernel
        if type(inner) is GridInterpolationKernel and _plain(inner) and inner.num_dims == 1:
            return inner
        return None
    if type(kernel) is GridInterpolationKernel and _plain(kernel):
        return kernel
    return None


def supports_grid_features(kernel: Kernel) -> bool:
    """Whether :func:`grid_features` handles ``kernel``: a non-batched ``GridInterpolationKernel``, or an
    ``AdditiveStructureKernel`` or ``ProductStructureKernel`` over a one-dimensional one, each optionally inside
    ``ScaleKernel``\\ s (no ``active_dims``)."""
    return _grid_kernel(kernel) is not None


def _interpolated(gik: GridInterpolationKernel, x1: Tensor, x2: Tensor, last_dim_is_batch: bool):
    """The grid Gram operator and the interpolation ``(indices, values)`` of ``x1`` and ``x2``.

    In training mode this is GPyTorch's own ``forward`` (a dynamic grid is refitted to the inputs). In eval
    mode the grid is kept: the cached training solves and the test features must share one grid and one
    root. (GPyTorch would refit a dynamic grid to every call's inputs.)
    """
    if gik.training or not gik.grid_is_dynamic:
        op = gik.forward(x1, x2, last_dim_is_batch=last_dim_is_batch)
        left, right = (op.left_interp_indices, op.left_interp_values), (op.right_interp_indices, op.right_interp_values)
        return op.base_linear_op, *left, *right
    if _outside(gik, x1) or (x2 is not x1 and _outside(gik, x2)):
        bounds = ", ".join(f"[{b[0]:.4g}, {b[1]:.4g}]" for b in _usable_range(gik))
        raise ValueError(
            f"Inputs fall outside the KISS-GP grid (its usable range is {bounds}). In eval mode the grid stays "
            "fixed, since cached solves belong to it: GPXModel refits it (and its caches) by itself; with the "
            "kernel alone, call gpytorch_explain.kernels.cover_grid or give GridInterpolationKernel grid_bounds."
        )
    base = to_linear_operator(gik._inducing_forward(last_dim_is_batch=last_dim_is_batch))
    idx1, val1 = gik._compute_grid(x1, last_dim_is_batch)
    idx2, val2 = (idx1, val1) if x2 is x1 else gik._compute_grid(x2, last_dim_is_batch)
    return base, idx1, val1, idx2, val2


def _usable_range(gik: GridInterpolationKernel) -> list[tuple[float, float]]:
    """GPyTorch's tight grid bounds, from the grid itself (``grid_bounds`` is a plain attribute that a loaded
    state dict does not restore): ``create_grid`` puts ``G`` points from ``b0 - h`` to ``b1 + h``,
    ``h = (b1 - b0) / (G - 2)``."""
    out = []
    for g in gik.grid:
        first, last, size = g[0].item(), g[-1].item(), g.numel()
        h = (last - first) / size
        b0, b1 = first + h, last - h
        spacing = (b1 - b0) / size
        out.append((b0 + 2.01 * spacing, b1 - 2.01 * spacing))
    return out


def _outside(gik: GridInterpolationKernel, x: Tensor) -> bool:
    x = x.reshape(-1, gik.num_dims)
    lows, highs = x.min(0).values.tolist(), x.max(0).values.tolist()
    for low, high, bound in zip(lows, highs, _usable_range(gik), strict=True):
        slack = 1e-9 * (bound[1] - bound[0])
        if low < bound[0] - slack or high > bound[1] + slack:
            return True
    return False


def cover_grid(kernel: Kernel, *xs: Tensor) -> bool:
    """Refit a dynamic KISS-GP grid in ``kernel`` to span all of ``xs`` if one of them falls outside it.

    The new grid spans the inputs the way GPyTorch's own update does (two spacings of margin). Returns whether
    the grid moved: anything cached on the old grid (a model's prediction caches) is then stale.
    """
    gik = _grid_kernel(kernel)
    if gik is None or not gik.grid_is_dynamic:
        return False
    xs = [x.detach().reshape(-1, gik.num_dims) for x in xs if x is not None and x.numel()]
    if not xs or not any(_outside(gik, x) for x in xs):
        return False
    x = torch.cat(xs)
    lows, highs = x.min(0).values.tolist(), x.max(0).values.tolist()
    bounds = []
    for low, high, size in zip(lows, highs, gik.grid_sizes, strict=True):
        spacing = (high - low) / (size - 4.02)
        bounds.append((low - 2.01 * spacing, high + 2.01 * spacing))
    gik.grid_bounds = tuple(bounds)
    gik.update_grid(create_grid(gik.grid_sizes, gik.grid_bounds, dtype=gik.grid[0].dtype, device=gik.grid[0].device))
    return True


def fit_grid(kernel: Kernel, x: Tensor) -> None:
    """Fit a dynamic KISS-GP grid in ``kernel`` to the inputs ``x`` (``(n, D)``) as GPyTorch's training call would."""
    gik = _grid_kernel(kernel)
    if gik is None or not gik.grid_is_dynamic or x.dim() != 2:
        return
    k = kernel
    while type(k) is ScaleKernel:
        k = k.base_kernel
    with torch.no_grad():
        gik.forward(x, x, last_dim_is_batch=type(k) in (AdditiveStructureKernel, ProductStructureKernel))


def _flat_order(gik: GridInterpolationKernel) -> list[int]:
    """The grid dimensions from the slowest- to the fastest-varying in the interpolation's flat grid index.

    Found by interpolating at grid nodes (cubic interpolation there is the node's indicator): moving one node
    along dimension ``j`` moves the flat index by that dimension's stride.
    """
    grid = gik.grid
    base_node = [min(2, g.numel() - 1) for g in grid]

    def flat(node):
        point = torch.stack([g[i] for g, i in zip(grid, node, strict=True)]).unsqueeze(0)
        idx, val = Interpolation().interpolate(grid, point)
        return int(idx[0, val[0].abs().argmax()])

    origin = flat(base_node)
    strides = []
    for j in range(len(grid)):
        node = list(base_node)
        node[j] = node[j] + 1 if node[j] + 1 < grid[j].numel() else node[j] - 1
        strides.append(abs(flat(node) - origin))
    order = sorted(range(len(grid)), key=lambda j: -strides[j])
    expected, stride = {}, 1
    for j in reversed(order):
        expected[j] = stride
        stride *= grid[j].numel()
    if any(strides[j] != expected[j] for j in order):
        raise NotImplementedError(f"Unrecognised flat grid index layout (strides {strides}).")
    return order


def gpytorch_grid_order_matters(kernel: Kernel) -> bool:
    """Whether GPyTorch's own KISS-GP evaluation of ``kernel`` is affected by its Kronecker-order mismatch (see
    ``_grid_factors``): a grid over two or more dimensions whose grids or lengthscales differ."""
    gik = next((m for m in kernel.modules() if isinstance(m, GridInterpolationKernel)), None)
    if gik is None or gik.num_dims < 2:
        return False
    grids_differ = any(not torch.equal(g, gik.grid[0]) for g in gik.grid[1:])
    ell = getattr(gik.base_kernel, "lengthscale", None)
    return grids_differ or (ell is not None and ell.numel() > 1 and not torch.allclose(ell, ell.reshape(-1)[0]))


def _grid_factors(gik: GridInterpolationKernel) -> list[Tensor]:
    r"""The one-dimensional grid Grams :math:`\mathbf K^{(j)}` of a multi-dimensional KISS-GP kernel, ordered like
    the interpolation's flat grid index.

    GPyTorch's ``GridKernel`` evaluates the same per-dimension Grams but multiplies them as
    ``KroneckerProductLinearOperator(*covars[::-1])``, i.e. :math:`\mathbf K^{(D)}\otimes\cdots\otimes\mathbf K^{(1)}`,
    while its interpolation indexes the grid with the last dimension varying fastest
    (:math:`\mathbf K^{(1)}\otimes\cdots\otimes\mathbf K^{(D)}`). With gpytorch 1.15.2 / linear_operator 0.6.1
    the two disagree whenever the dimensions' grids or lengthscales differ, and GPyTorch's own KISS-GP then
    pairs each dimension with another one's Gram. Here the factors follow the interpolation, so
    :math:`\boldsymbol\Phi\boldsymbol\Phi^\top` is the structured interpolation of the base kernel itself.
    """
    grid = gik.grid
    size = max(g.numel() for g in grid)
    padded = [torch.cat([g, g.new_zeros(size - g.numel())]) if g.numel() < size else g for g in grid]
    full = torch.stack(padded, dim=-1)  # (G_max, D): the points at which each dimension's Gram is evaluated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        covars = to_dense(gik.base_kernel(full, full, last_dim_is_batch=True))  # (D, G_max, G_max)
    return [covars[j, : grid[j].numel(), : grid[j].numel()] for j in _flat_order(gik)]


def _eigen(factors: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """Eigenvalues (clamped at zero) and eigenvectors of each factor."""
    vals, vecs = [], []
    for f in factors:
        lam, q = torch.linalg.eigh(f)
        vals.append(lam.clamp_min(0))
        vecs.append(q)
    return vals, vecs


def _kept(vals: list[Tensor], threshold: float, limit: int | None = None) -> list[Tensor] | None:
    r"""The multi-indices :math:`(a_1, \dots, a_D)` (one index tensor per factor) of the eigenvalue products
    :math:`\lambda^{(1)}_{a_1}\cdots\lambda^{(D)}_{a_D}` above ``threshold`` times the largest.

    Built one factor at a time: a partial product is dropped as soon as it stays below the cut even with the
    largest eigenvalues of the remaining factors, so nothing of size :math:`\prod_j G_j` is formed. Every partial
    product kept has a kept extension (the largest eigenvalues attain the bound), so when more than ``limit``
    partial products survive, so would more than ``limit`` columns: then ``None`` is returned.
    """
    tops = [lam.max() for lam in vals]
    cut = threshold * torch.stack(tops).prod()
    prod = vals[0].new_ones(1)
    idx: list[Tensor] = []
    for j, lam in enumerate(vals):
        rest = torch.stack(tops[j + 1 :]).prod() if j + 1 < len(vals) else lam.new_ones(())
        cand = prod.unsqueeze(-1) * lam.unsqueeze(0)  # (kept so far, G_j)
        row, col = torch.nonzero(cand * rest > cut, as_tuple=True)
        if limit is not None and row.numel() > limit:
            return None
        prod = cand[row, col]
        idx = [ix[row] for ix in idx] + [col]
    return idx


def _root(factors: list[Tensor], threshold: float, limit: int | None = None) -> Tensor | None:
    r"""Columns :math:`\sqrt{\lambda}\,\mathbf q` of the Kronecker product's eigenpairs above the threshold
    (``None`` when there are more than ``limit``)."""
    vals, vecs = _eigen(factors)
    idx = _kept(vals, threshold, limit)
    if idx is None:
        return None
    root = vecs[0][:, idx[0]] * vals[0][idx[0]].sqrt()
    for q, lam, ix in zip(vecs[1:], vals[1:], idx[1:], strict=True):
        col = q[:, ix] * lam[ix].sqrt()
        root = (root.unsqueeze(1) * col.unsqueeze(0)).reshape(-1, ix.numel())
    return root


def _product_roots(
    grams: Tensor, dims: int, threshold: float, limit: int | None = None
) -> list[tuple[Tensor, Tensor]] | None:
    r"""Per-dimension roots of a product structure over a one-dimensional grid.

    For the kept multi-indices :math:`(a_1, \dots, a_D)` of the Kronecker product of the dimensions' grid Grams,
    dimension :math:`j` contributes the columns :math:`\sqrt{\lambda^{(j)}_{a_j}}\,\mathbf q^{(j)}_{a_j}`. Returns,
    per dimension, the distinct columns it uses (``G x u_j``) and, for each kept multi-index, which of them
    (``None`` when more than ``limit`` multi-indices are kept).
    """
    if grams.dim() == 2 or grams.size(0) == 1:
        vals, vecs = _eigen([grams.reshape(grams.shape[-2:])])
        vals, vecs = vals * dims, vecs * dims
    else:
        vals, vecs = _eigen([grams[j] for j in range(dims)])
    kept = _kept(vals, threshold, limit)
    if kept is None:
        return None
    out = []
    for q, lam, ix in zip(vecs, vals, kept, strict=True):
        used, which = torch.unique(ix, return_inverse=True)
        out.append((q[:, used] * lam[used].sqrt(), which))
    return out


def _product_features(roots: list[tuple[Tensor, Tensor]], indices: Tensor, values: Tensor) -> Tensor:
    r""":math:`\boldsymbol\Phi = (\mathbf W_1\mathbf S_1) \odot \cdots \odot (\mathbf W_D\mathbf S_D)`, by the
    face-splitting identity

    .. math::

        \bigodot_j \mathbf W_j\mathbf A_j\mathbf W_j^\top
        = (\mathbf W_1 \bullet\cdots\bullet \mathbf W_D)(\mathbf A_1\otimes\cdots\otimes\mathbf A_D)
        (\mathbf W_1 \bullet\cdots\bullet \mathbf W_D)^\top,

    with :math:`\mathbf S_j` the columns of the kept Kronecker eigenpairs (:func:`_product_roots`) and
    ``indices``/``values`` the per-dimension interpolation (``(D, n, 4)``).
    """
    phi = None
    for j, (root, which) in enumerate(roots):
        part = _interp_times(indices[j], values[j], root)[:, which]
        phi = part if phi is None else phi * part
    return phi


def grid_features(
    kernel: Kernel, x1: Tensor, x2: Tensor | None = None, max_width: int | None = None
) -> tuple[Tensor, Tensor | None] | None:
    r"""KISS-GP features with :math:`\boldsymbol\Phi_1\boldsymbol\Phi_2^\top = \mathbf K_{\mathrm{SKI}}`.

    Both use one grid and one root, so they are consistent with each other (call once for a train/test
    pair). In eval mode the grid is not moved; inputs outside it raise ``ValueError``.

    :param kernel: A kernel for which :func:`supports_grid_features` holds.
    :param x1: Inputs ``(n1, D)``.
    :param x2: Optional second inputs ``(n2, D)``.
    :param max_width: Return ``None`` when the root has more columns than this.
    :return: ``(phi1, phi2)`` (``phi2`` is ``None`` without ``x2``), or ``None`` when the root is wider than
        ``max_width``. Without ``max_width``, a root wider than ``max_block_elements // 64`` columns
        (:class:`gpytorch_explain.settings.max_block_elements`) raises ``ValueError``.

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch_explain.kernels import grid_features
        >>> k = gpytorch.kernels.GridInterpolationKernel(gpytorch.kernels.RBFKernel(), grid_size=50, num_dims=1)
        >>> x = torch.linspace(0, 1, 20, dtype=torch.float64).unsqueeze(-1)
        >>> k = k.double()
        >>> phi, _ = grid_features(k, x)
        >>> torch.allclose(phi @ phi.T, k(x).to_dense(), atol=1e-8)
        True
    """
    gik = _grid_kernel(kernel)
    if gik is None:
        raise TypeError(f"grid_features does not support {type(kernel).__name__}; see supports_grid_features.")
    if x1.dim() != 2 or (x2 is not None and x2.dim() != 2):
        raise ValueError("grid_features needs 2-D inputs (no batch dimensions).")
    scale = None
    k = kernel
    while type(k) is ScaleKernel:
        s = k.outputscale.reshape(())
        scale = s if scale is None else scale * s
        k = k.base_kernel
    additive = type(k) is AdditiveStructureKernel
    product = type(k) is ProductStructureKernel
    x2_ = x1 if x2 is None else x2
    base, idx1, val1, idx2, val2 = _interpolated(gik, x1, x2_, last_dim_is_batch=additive or product)
    threshold = explain_settings.grid_root_threshold(x1.dtype)
    limit = explain_settings.block_budget("grid_root_columns") if max_width is None else max_width

    def too_wide():
        if max_width is not None:
            return None
        raise ValueError(
            f"The grid root has more than {limit} columns (many dimensions, a fine grid or short "
            "lengthscales); pass max_width, or raise gpytorch_explain.settings.grid_root_tolerance."
        )

    if product:
        # one Kronecker root over all dimensions, interpolated per dimension (see _product_features)
        roots = _product_roots(base.to_dense(), idx1.size(0), threshold, limit=limit)
        if roots is None:
            return too_wide()
        if scale is not None:
            roots[0] = (roots[0][0] * scale.sqrt(), roots[0][1])
        phi1 = _product_features(roots, idx1, val1)
        phi2 = None if x2 is None else _product_features(roots, idx2, val2)
        return phi1, phi2
    if additive:
        grams = base.to_dense()  # (D or 1, G, G): the same 1-D grid and kernel in every dimension
        dims = idx1.size(0)
        if grams.dim() == 2 or grams.size(0) == 1:
            roots = [_root([grams.reshape(grams.shape[-2:])], threshold)] * dims
        else:
            roots = [_root([grams[j]], threshold) for j in range(dims)]
        terms = [(roots[j], idx1[j], val1[j], idx2[j], val2[j]) for j in range(dims)]
    else:
        if gik.num_dims == 1:
            factors = list(base.linear_ops) if isinstance(base, KroneckerProductLinearOperator) else [base]
            factors = [f.to_dense() for f in factors]
        else:
            # the Kronecker factors in the order of the interpolation's flat grid index (see _grid_factors)
            factors = _grid_factors(gik)
        root = _root(factors, threshold, limit=limit)
        if root is None:
            return too_wide()
        terms = [(root, idx1, val1, idx2, val2)]
    width = sum(t[0].size(-1) for t in terms)
    if max_width is not None and width > max_width:
        return None
    if scale is not None:
        terms = [(t[0] * scale.sqrt(),) + t[1:] for t in terms]
    phi1 = torch.cat([_interp_times(t[1], t[2], t[0]) for t in terms], dim=-1)
    phi2 = None if x2 is None else torch.cat([_interp_times(t[3], t[4], t[0]) for t in terms], dim=-1)
    return phi1, phi2


def _scale_of(kernel: Kernel) -> tuple[Tensor | None, Kernel]:
    """The product of the ``ScaleKernel`` output scales around ``kernel``'s structure, and the structure."""
    scale = None
    while type(kernel) is ScaleKernel:
        s = kernel.outputscale.reshape(())
        scale = s if scale is None else scale * s
        kernel = kernel.base_kernel
    return scale, kernel


def _product_grid_interpolation(indices: Tensor, values: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """Per-dimension interpolation ``(D, n, k)`` on one 1-D grid of ``size`` points -> interpolation ``(n, k^D)``
    on the D-dimensional product grid (flat index with the last dimension fastest)."""
    flat, weight = indices[0], values[0]
    for j in range(1, indices.size(0)):
        flat = (flat.unsqueeze(-1) * size + indices[j].unsqueeze(-2)).flatten(-2)
        weight = (weight.unsqueeze(-1) * values[j].unsqueeze(-2)).flatten(-2)
    return flat, weight


def grid_operator(kernel: Kernel, x1: Tensor, x2: Tensor | None = None) -> LinearOperator | None:
    r"""The KISS-GP covariance :math:`\mathbf W_1\mathbf K_{UU}\mathbf W_2^\top` as a lazy interpolated operator
    whose Kronecker factors follow the interpolation's grid index, for the structures whose GPyTorch operator is
    not the interpolation of its base kernel.

    * A multi-dimensional ``GridInterpolationKernel``: GPyTorch (1.15.2) multiplies the grid Grams in the
      opposite order to its interpolation index (see ``_grid_factors``).
    * A ``ProductStructureKernel`` over a one-dimensional grid: by the face-splitting identity it is the KISS-GP
      on the :math:`D`-dimensional product grid (:math:`4^D` weights per row), built when that grid has at most
      ``max_block_elements`` points. GPyTorch multiplies Lanczos roots of the factors instead.

    Unlike :func:`grid_features` nothing is truncated, so this is the path for roots too wide for features
    (matrix products only: CG). Returns ``None`` for the structures GPyTorch evaluates exactly (one-dimensional
    grids, additive structures) and for products over too many dimensions. In eval mode the grid stays fixed.

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch_explain.kernels import grid_features, grid_operator
        >>> rbf = gpytorch.kernels.RBFKernel(ard_num_dims=2)
        >>> k = gpytorch.kernels.GridInterpolationKernel(rbf, grid_size=[30, 20], num_dims=2).double()
        >>> k.base_kernel.lengthscale = torch.tensor([[0.7, 1.3]])
        >>> x = torch.randn(50, 2, dtype=torch.float64)
        >>> phi, _ = grid_features(k, x)
        >>> torch.allclose(grid_operator(k, x).to_dense(), phi @ phi.T, atol=1e-8)
        True
    """
    gik = _grid_kernel(kernel)
    if gik is None or x1.dim() != 2 or (x2 is not None and x2.dim() != 2):
        return None
    scale, k = _scale_of(kernel)
    product = type(k) is ProductStructureKernel
    if type(k) is AdditiveStructureKernel or (not product and gik.num_dims == 1):
        return None
    if product:
        size = gik.grid[0].numel()
        if size ** x1.size(-1) > explain_settings.block_budget("operator_grid"):
            return None
        base, idx1, val1, idx2, val2 = _interpolated(gik, x1, x1 if x2 is None else x2, last_dim_is_batch=True)
        grams = base.to_dense()
        dims = idx1.size(0)
        factors = [grams.reshape(grams.shape[-2:])] * dims if grams.size(0) == 1 else list(grams.unbind(0))
        per_dim = (idx1, val1)
        idx1, val1 = _product_grid_interpolation(idx1, val1, size)
        idx2, val2 = (idx1, val1) if x2 is None else _product_grid_interpolation(idx2, val2, size)
    else:
        _, idx1, val1, idx2, val2 = _interpolated(gik, x1, x1 if x2 is None else x2, last_dim_is_batch=False)
        factors = _grid_factors(gik)
        per_dim = None
        if x2 is None:  # each dimension's own interpolation, in the factors' (flat index) order
            parts = [Interpolation().interpolate([gik.grid[j]], x1[:, j : j + 1]) for j in _flat_order(gik)]
            per_dim = (torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]))
    kuu = KroneckerProductLinearOperator(*[to_linear_operator(f) for f in factors])
    if scale is not None:
        kuu = kuu * scale
    if x2 is None and per_dim is not None:
        return _GridInterpolatedLinearOperator(kuu, idx1, val1, idx2, val2, *per_dim)
    return _GridInterpolatedLinearOperator(kuu, idx1, val1, idx2, val2)
