#!/usr/bin/env python3
r"""Localized lasso (Yamada, Koh, Iwata, Shawe-Taylor & Kaski, 2017, *Localized Lasso for High-Dimensional
Regression*, AISTATS), and the network lasso (Hallac et al. 2015) as its special case :math:`\lambda_2 = 0`.

One linear model per training sample, :math:`y_i \approx \mathbf w_i^\top\mathbf x_i`, fitted jointly:

.. math::

    J(\mathbf W) = \sum_i (y_i - \mathbf w_i^\top\mathbf x_i)^2
        + \lambda_1 \sum_{i,j} r_{ij}\,\|\mathbf w_i - \mathbf w_j\|_2
        + \lambda_2 \sum_i \|\mathbf w_i\|_1^2,

where :math:`r_{ij}\in\{0,1\}` is a symmetrised k-nearest-neighbour graph by cosine similarity of the inputs (as in
the GPX paper's setup) and the sum over :math:`i,j` runs over ordered pairs. The network term fuses neighbours'
weights; the exclusive :math:`\ell_{1,2}` term makes each sample's weights sparse.

Solver (iteratively reweighted least squares, Yamada et al. §3): with the majorisers
:math:`\|\mathbf a\| \le \|\mathbf a\|^2/(2\|\mathbf a_0\|) + \|\mathbf a_0\|/2` and
:math:`\|\mathbf w\|_1^2 \le \sum_k (\|\mathbf w_0\|_1/|w_{0k}|)\,w_k^2`, each step solves the sparse SPD system

.. math::

    \big(\operatorname{blockdiag}(\mathbf x_i\mathbf x_i^\top) + \lambda_1 \mathbf L_F\otimes\mathbf I_d
        + \lambda_2\operatorname{diag}(\mathbf g)\big)\operatorname{vec}(\mathbf W)
        = \operatorname{vec}(\mathbf x_i y_i),
    \quad F_{ij} = \frac{r_{ij}}{\|\mathbf w_i - \mathbf w_j\|},\ g_{ik} = \frac{\|\mathbf w_i\|_1}{|w_{ik}|},

(:math:`\mathbf L_F` the graph Laplacian of :math:`F`) by preconditioned CG, so :math:`J` never increases.
Distances and :math:`|w_{ik}|` are floored at ``eps``. The first step uses :math:`F = r` and
:math:`\mathbf g = \mathbf 1` (a graph-regularised ridge), so that neighbours do not start fused.

Test samples (our choice; the paper predicts transductively): a test sample's weights are the mean of the
weights of its ``k`` nearest training samples by cosine similarity, and its prediction is
:math:`\mathbf w_*^\top\mathbf x_*`. Written for this benchmark from the paper's equations (no code copied).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg

__all__ = ["LocalizedLasso", "knn_graph", "localized_lasso_objective"]


def _normalise_rows(x: np.ndarray) -> np.ndarray:
    nrm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(nrm > 0, nrm, 1.0)


def knn_graph(x: np.ndarray, k: int) -> sp.csr_matrix:
    """Symmetrised, unweighted k-nearest-neighbour graph by cosine similarity (no self-loops)."""
    xn = _normalise_rows(x)
    sim = xn @ xn.T
    np.fill_diagonal(sim, -np.inf)
    k = min(k, len(x) - 1)
    nn = np.argpartition(-sim, k - 1, axis=1)[:, :k]
    rows = np.repeat(np.arange(len(x)), k)
    a = sp.csr_matrix((np.ones(rows.size), (rows, nn.ravel())), shape=(len(x), len(x)))
    return ((a + a.T) > 0).astype(np.float64).tocsr()


def localized_lasso_objective(W: np.ndarray, x: np.ndarray, y: np.ndarray, R, lam1: float, lam2: float) -> float:
    """The objective :math:`J(\\mathbf W)` above (ordered pairs in the network term)."""
    R = sp.coo_matrix(R)
    fit = ((y - (W * x).sum(1)) ** 2).sum()
    net = (R.data * np.linalg.norm(W[R.row] - W[R.col], axis=1)).sum()
    excl = (np.abs(W).sum(1) ** 2).sum()
    return float(fit + lam1 * net + lam2 * excl)


class LocalizedLasso:
    """Localized lasso regression (network lasso with ``lam2=0``); see the module docstring.

    :param lam1: network strength :math:`\\lambda_1`; :param lam2: exclusive-lasso strength :math:`\\lambda_2`;
    :param k: neighbours in the graph; :param max_iter: IRLS steps; :param tol: stop when the relative
        decrease of :math:`J` falls below this; :param eps: floor for distances and |weights|.
    """

    def __init__(
        self,
        lam1: float = 1.0,
        lam2: float = 0.1,
        k: int = 10,
        max_iter: int = 50,
        tol: float = 1e-5,
        eps: float = 1e-6,
        cg_tol: float = 1e-8,
        cg_maxiter: int = 2000,
    ):
        self.lam1, self.lam2, self.k = lam1, lam2, k
        self.max_iter, self.tol, self.eps = max_iter, tol, eps
        self.cg_tol, self.cg_maxiter = cg_tol, cg_maxiter

    def fit(self, x: np.ndarray, y: np.ndarray) -> LocalizedLasso:
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        n, d = x.shape
        self.train_x_ = x
        R = knn_graph(x, self.k)
        self.graph_ = R
        blocks = sp.block_diag([np.outer(r, r) for r in x], format="csr")
        rhs = (x * y[:, None]).ravel()
        Rc = sp.coo_matrix(R)
        I_d = sp.identity(d, format="csr")
        W = np.zeros((n, d))
        F = R.copy()
        g = np.ones(n * d)
        history = []
        for it in range(self.max_iter):
            L = sp.diags(np.asarray(F.sum(1)).ravel()) - F
            A = (blocks + self.lam1 * sp.kron(L, I_d, format="csr") + self.lam2 * sp.diags(g)).tocsr()
            diag = A.diagonal()
            M = LinearOperator(A.shape, matvec=lambda v, dg=diag: v / dg)
            sol, _ = cg(A, rhs, x0=W.ravel(), rtol=self.cg_tol, maxiter=self.cg_maxiter, M=M)
            W_new = sol.reshape(n, d)
            J = localized_lasso_objective(W_new, x, y, R, self.lam1, self.lam2)
            if history and J > history[-1]:  # inexact CG step: keep the previous iterate
                break
            W = W_new
            history.append(J)
            if it > 0 and (history[-2] - J) <= self.tol * abs(history[-2]):
                break
            dist = np.maximum(np.linalg.norm(W[Rc.row] - W[Rc.col], axis=1), self.eps)
            F = sp.csr_matrix((Rc.data / dist, (Rc.row, Rc.col)), shape=(n, n))
            absw = np.maximum(np.abs(W), self.eps)
            g = (absw.sum(1, keepdims=True) / absw).ravel()
        self.coef_ = W
        self.objective_history_ = history
        return self

    def test_weights(self, x: np.ndarray) -> np.ndarray:
        """Weights for new samples: mean of the ``k`` most cosine-similar training samples' weights."""
        x = np.asarray(x, dtype=np.float64)
        sim = _normalise_rows(x) @ _normalise_rows(self.train_x_).T
        k = min(self.k, self.train_x_.shape[0])
        nn = np.argpartition(-sim, k - 1, axis=1)[:, :k]
        return self.coef_[nn].mean(1)

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return (self.test_weights(x) * x).sum(1)
