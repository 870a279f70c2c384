#!/usr/bin/env python3
r"""Fitting GPX models, in the manner of BoTorch's ``fit_gpytorch_mll``: take the model (or its marginal
likelihood), train it, return it in eval mode.

* :func:`fit_gpx_model` maximises the exact log marginal likelihood of a :class:`~gpytorch_explain.GPXModel`,

  .. math:: \log p(\mathbf y) = \log\mathcal N\bigl(\mathbf y \mid \mathbf m,\;
      \sigma_y^2\mathbf I + (\mathbf K + \sigma_w^2\mathbf I)\odot\mathbf Z\mathbf Z^\top\bigr),

  per sample, with L-BFGS (strong-Wolfe line search) or Adam.
* :func:`fit_variational_gpx_model` maximises the ELBO of a :class:`~gpytorch_explain.VariationalGPXModel`
  (:class:`~gpytorch_explain.mlls.GPXVariationalELBO` by default) by minibatch Adam, with natural-gradient steps
  for a natural variational distribution.

``GPXModel.fit()`` and ``VariationalGPXModel.fit()`` call these.

Example:
    >>> import torch
    >>> from gpytorch_explain import GPXModel, fit_gpx_model
    >>> x = torch.randn(30, 2, dtype=torch.float64)
    >>> model = fit_gpx_model(GPXModel(x, x[:, 0] * x[:, 1]), max_iter=5)
    >>> model.training, len(model.fit_history) > 0
    (False, True)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable

import gpytorch
import torch
from gpytorch import settings as gsettings
from gpytorch.likelihoods import BernoulliLikelihood
from gpytorch.mlls import MarginalLogLikelihood
from gpytorch.models import ApproximateGP, ExactGP
from torch import Tensor

from ._compat import _NaturalVariationalDistribution
from .errors import ModelStateError
from .kernels import GPXKernel
from .mlls.gpx_variational_elbo import GPXVariationalELBO, _label_scheme, bernoulli_label_signs
from .utils import check_same_rows, check_vector, dense_gaussian_nll, dense_limit
from .variational import GPXVariationalStrategy

__all__ = ["fit_gpx_model", "fit_variational_gpx_model"]


def _unpack(model, kind: str, check) -> tuple:
    """``(model, mll or None)`` from a model or its marginal likelihood, checked to be of the right kind."""
    mll = None
    if isinstance(model, MarginalLogLikelihood):
        mll, model = model, model.model
    if not check(model):
        raise TypeError(f"{kind} expected, got {type(model).__name__}.")
    return model, mll


def fit_gpx_model(
    model,
    optimizer: str = "lbfgs",
    max_iter: int | None = None,
    lr: float | None = None,
    tolerance: float | None = None,
    progress: bool = False,
    fit_dtype: torch.dtype | None = None,
):
    r"""Maximise the log marginal likelihood of a :class:`~gpytorch_explain.GPXModel`.

    The marginal likelihood is computed through a Cholesky factor up to
    ``n = max(gpytorch.settings.max_cholesky_size, gpytorch_explain.settings.max_cholesky_size)``
    (L-BFGS needs a deterministic objective) and with GPyTorch's CG/Lanczos estimators above. Before it
    starts, the memory of a path over the :math:`n\times n` covariance is checked (``model.check_memory``).

    :param model: A ``GPXModel``, or a marginal-likelihood object around it (then used as the objective, e.g.
        ``ExactMarginalLogLikelihood`` with priors, or ``gpytorch.mlls.LeaveOneOutPseudoLikelihood`` to choose the
        hyperparameters by leave-one-out predictive log density instead of the marginal likelihood).
    :param optimizer: ``"lbfgs"`` (default; ``torch.optim.LBFGS`` with a strong-Wolfe line
        search) or ``"adam"``.
    :param max_iter: Iterations (default 100 for L-BFGS, 200 for Adam). For L-BFGS these are its outer iterations;
        the objective evaluations of its line searches are not capped separately.
    :param lr: Step size (default 1.0 for L-BFGS, 0.05 for Adam).
    :param tolerance: L-BFGS stops when the gradient, the step or the change of the loss (the
        negative log marginal likelihood per sample) falls below this. Default ``min(1e-5, 1e-2 / n)``:
        the loss is per sample, so a fixed tolerance would stop large fits while the total log
        likelihood still gains whole nats.
    :param progress: Show a tqdm progress bar of iterations out of ``max_iter`` (for L-BFGS its outer iterations;
        objective evaluations, which the line search adds, are shown beside it as ``evals``).
    :param fit_dtype: The dtype the hyperparameters are optimised in. Default: float64 for a float32 (or half,
        bfloat16) model, the model's own dtype otherwise.

    **Low-precision models are optimised in float64.** The float32 objective is noisy at the scale of the
    L-BFGS tolerances (its summed log-determinant and quadratic form carry relative errors of order
    :math:`10^{-7}\sqrt n`), so the strong-Wolfe line search stalls early: a float32 model with an
    ``InducingPointKernel`` base (n = 8000, M = 256, D = 4) stopped with test RMSE 0.0124 where the float64 fit
    reached 0.0013, and at n = 2000, M = 64 it stopped after 20 iterations at a loss 0.022 nats per sample above
    the float64 optimum. So by default the model (and the marginal likelihood, when one is given) is converted to
    float64 in place for the fit and back afterwards: its parameters are rounded to float32, its training data
    (float32 values) come back unchanged, and its predictions use float32 as before. During the fit the training
    data, parameters and the objective's work take float64 memory; when that fails ``model.check_memory``
    (``MemoryError``), the fit warns and runs in the model's dtype.
    ``fit_dtype=torch.float32`` keeps the old behaviour.

    :return: The model, in eval mode (also when the fit raises); ``model.fit_history`` holds the losses (one per
        objective evaluation),
        ``model.fit_iterations`` and ``model.fit_evaluations`` the counts.
    """
    model, mll = _unpack(
        model,
        "fit_gpx_model: a GPXModel (an ExactGP with a GPXKernel) or its ExactMarginalLogLikelihood",
        lambda m: isinstance(m, ExactGP) and isinstance(getattr(m, "covar_module", None), GPXKernel),
    )
    if model.train_inputs is None:
        raise ModelStateError("fit needs training data; this model has none.")
    dtype = model.train_inputs[0].dtype
    if fit_dtype is None:
        fit_dtype = torch.float64 if dtype in (torch.float32, torch.float16, torch.bfloat16) else dtype
    if fit_dtype != dtype:
        fitted = _fit_in_dtype(model, mll, fit_dtype, optimizer, max_iter, lr, tolerance, progress)
        if fitted is not None:
            return fitted
    optimizer = optimizer.lower()
    if optimizer not in ("lbfgs", "adam"):
        raise ValueError(f"optimizer must be 'lbfgs' or 'adam', got {optimizer!r}.")
    if max_iter is None:
        max_iter = 100 if optimizer == "lbfgs" else 200
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter}.")
    if lr is None:
        lr = 1.0 if optimizer == "lbfgs" else 0.05
    if tolerance is None:
        tolerance = min(1e-5, 1e-2 / max(model.train_targets.size(-1), 1))
    model.check_memory("GPX fit", training=True)
    model.train()
    model.likelihood.train()
    if mll is None:
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    params = [p for p in model.parameters() if p.requires_grad]
    inputs = model.train_inputs[0]
    history: list[float] = []
    model.fit_history = history  # filled as the fit goes (also when it is interrupted)

    # tqdm.auto only when the bar is shown: importing it in a notebook without ipywidgets warns (TqdmWarning)
    if progress:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm

    bar = tqdm(total=max_iter, desc=f"GPX fit ({optimizer})", unit="it", disable=not progress)
    chol = dense_limit()
    # the closed-form dense path computes ExactMarginalLogLikelihood's objective; any other objective (e.g.
    # gpytorch's LeaveOneOutPseudoLikelihood, or a subclass with its own terms) goes through the mll itself
    dense = (
        type(mll) is gpytorch.mlls.ExactMarginalLogLikelihood
        and model.train_targets.size(-1) <= chol
        and gsettings.observation_nan_policy.value() == "ignore"
    )

    def loss_fn() -> Tensor:
        output = gpytorch.models.ExactGP.__call__(model, inputs)
        if dense:
            # the same objective as ExactMarginalLogLikelihood, with a closed-form gradient of the
            # Gaussian log density in the dense covariance (fewer O(n^3) passes per evaluation)
            marginal = model.likelihood(output)
            covar = marginal.lazy_covariance_matrix.to_dense()
            res = -dense_gaussian_nll(covar, model.train_targets - marginal.mean)
            res = mll._add_other_terms(res, ())
            return -res.div(model.train_targets.size(-1))
        with gsettings.max_cholesky_size(chol):
            return -mll(output, model.train_targets)

    def show(iterations: int) -> None:
        bar.n = min(iterations, max_iter)
        bar.set_postfix(loss=f"{history[-1]:.4f}", evals=len(history), refresh=False)
        bar.refresh()

    iterations = 0
    try:
        if optimizer == "lbfgs":
            opt = torch.optim.LBFGS(
                params,
                lr=lr,
                max_iter=max_iter,
                # torch caps objective evaluations at 1.25 max_iter by default, which ended fits before max_iter
                # iterations; a strong-Wolfe line search takes at most 25 evaluations, so max_iter binds
                max_eval=25 * max_iter,
                tolerance_grad=tolerance,
                tolerance_change=tolerance,
                history_size=20,
                line_search_fn="strong_wolfe",
            )
            state = opt.state[opt._params[0]]

            def closure():
                opt.zero_grad()
                loss = loss_fn()
                loss.backward()
                history.append(loss.item())
                # torch's L-BFGS counts an iteration before its line search evaluates the objective
                show(state.get("n_iter", 0))
                return loss

            opt.step(closure)
            iterations = int(state.get("n_iter", 0))
        else:
            opt = torch.optim.Adam(params, lr=lr)
            for _ in range(max_iter):
                opt.zero_grad()
                loss = loss_fn()
                loss.backward()
                opt.step()
                history.append(loss.item())
                iterations += 1
                show(iterations)
        if history:
            show(iterations)
    finally:
        bar.close()
        model.eval()  # also when the fit raises (e.g. a non-PSD covariance or an interrupt)
    if history and not math.isfinite(history[-1]):
        warnings.warn("GPX fit ended with a non-finite loss; check the data scaling.", RuntimeWarning, stacklevel=3)
    model.fit_history = history
    model.fit_iterations = iterations
    model.fit_evaluations = len(history)
    return model


def _fit_in_dtype(model, mll, fit_dtype, optimizer, max_iter, lr, tolerance, progress):
    """Fit ``model`` (and ``mll``) converted to ``fit_dtype`` in place, then convert it back to its dtype (its
    parameters rounded, its float32 training data unchanged); ``None`` (after a warning, with the model back in
    its dtype) when the converted model does not pass the memory check."""
    dtype = model.train_inputs[0].dtype
    module = mll if mll is not None else model  # converting the mll converts its model and likelihood too
    module.to(fit_dtype)
    try:
        try:
            model.check_memory(f"GPX fit (in {fit_dtype})", training=True)
        except MemoryError as err:
            warnings.warn(
                f"GPX fit: the {dtype} model converted to {fit_dtype} does not fit in memory ({err}); optimising "
                "in the model's own dtype, where L-BFGS may stop early on the noisier objective.",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        fit_gpx_model(mll if mll is not None else model, optimizer, max_iter, lr, tolerance, progress, fit_dtype)
    finally:
        module.to(dtype)
    model.train()  # drops the caches built in fit_dtype
    model.eval()
    return model


def _variational_loader(
    model, train_x, train_y, train_z, batch_size: int, shuffle: bool, generator
) -> tuple[Iterable, int | None]:
    if torch.is_tensor(train_x):
        if train_y is None:
            raise ValueError("fit(train_x, train_y, ...) needs train_y when train_x is a tensor.")
        inputs = model._make_inputs(train_x, train_z)
        train_y = check_vector("train_y", train_y)
        check_same_rows(train_x=inputs, train_y=train_y)
        if inputs.size(0) == 0:
            raise ValueError("train_x has no rows: nothing to fit.")
        if train_y.dtype != inputs.dtype:
            raise TypeError(f"train_y has dtype {train_y.dtype} but the model is {inputs.dtype}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}.")
        dataset = torch.utils.data.TensorDataset(inputs, train_y)
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)
        return loader, inputs.size(0)
    if train_y is not None or train_z is not None:
        raise ValueError("With a DataLoader, pass neither train_y nor train_z (the batches carry them).")
    if not isinstance(train_x, Iterable):
        raise TypeError(f"train_x must be a tensor or a DataLoader of batches, got {type(train_x).__name__}.")
    dataset = getattr(train_x, "dataset", None)
    return train_x, (len(dataset) if dataset is not None and hasattr(dataset, "__len__") else None)


def fit_variational_gpx_model(
    model,
    train_x: Tensor | Iterable,
    train_y: Tensor | None = None,
    train_z: Tensor | None = None,
    num_epochs: int = 10,
    lr: float = 0.01,
    batch_size: int = 1024,
    ngd_lr: float = 0.1,
    objective: str = "gpx",
    num_data: int | None = None,
    shuffle: bool = True,
    generator: torch.Generator | None = None,
    progress: bool = False,
):
    r"""Maximise the ELBO by minibatch stochastic optimisation.

    :param model: A :class:`~gpytorch_explain.VariationalGPXModel`, or a variational marginal likelihood of one
        (e.g. ``GPXVariationalELBO(model.likelihood, model, num_data)``), then used as the objective as it is
        (``objective`` is ignored; ``num_data`` defaults to the objective's).
    :param train_x: Either a tensor :math:`\mathbf X` (``(n, D)``; with ``train_y`` and, for separate features,
        ``train_z``), minibatched here, or a ``DataLoader`` (any iterable) of batches ``(inputs, y)`` with input
        rows :math:`[\mathbf x\mid\mathbf z]` or ``(x, z, y)``.
    :param num_epochs: Passes over the data.
    :param lr: Adam step size (hyperparameters, inducing points and, unless ``q`` is natural, ``q``).
    :param batch_size: Minibatch size when ``train_x`` is a tensor.
    :param ngd_lr: Natural-gradient step size, used when the variational distribution is natural
        (``variational_distribution="natural"``); then ``q`` is updated by ``gpytorch.optim.NGD``.
    :param objective: ``"gpx"`` (:class:`GPXVariationalELBO`, default) or ``"elbo"`` (GPyTorch's
        ``VariationalELBO``, weight noise inside :math:`q(f)`; looser).
    :param num_data: :math:`n` for the ELBO's scaling (default: the dataset's length).
    :param shuffle: Whether the internal ``DataLoader`` shuffles the data.
    :param generator: The ``torch.Generator`` of that shuffling.
    :param progress: Show a tqdm progress bar over epochs.
    :return: The model in eval mode; ``model.fit_history`` holds the mean loss (negative ELBO per datum) of each
        epoch.
    """
    model, mll = _unpack(
        model,
        "fit_variational_gpx_model: a VariationalGPXModel or a variational marginal likelihood of one",
        lambda m: (
            isinstance(m, ApproximateGP)
            and isinstance(getattr(m, "variational_strategy", None), GPXVariationalStrategy)
        ),
    )
    objective = objective.lower()
    if objective not in ("gpx", "elbo"):
        raise ValueError(f"objective must be 'gpx' or 'elbo', got {objective!r}.")
    if isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 0:
        raise ValueError(f"num_epochs must be a non-negative int, got {num_epochs!r}.")
    loader, size = _variational_loader(model, train_x, train_y, train_z, batch_size, shuffle, generator)
    if num_data is None and mll is not None:
        num_data = mll.num_data
    num_data = size if num_data is None else int(num_data)
    if num_data is None or num_data < 1:
        raise ValueError("fit could not infer the number of training samples; pass num_data.")
    if mll is None:
        mll_class = GPXVariationalELBO if objective == "gpx" else gpytorch.mlls.VariationalELBO
        mll = mll_class(model.likelihood, model, num_data=num_data)

    dist = model.variational_strategy._variational_distribution
    natural = isinstance(dist, _NaturalVariationalDistribution)
    var_ids = {id(p) for p in dist.parameters()}
    others = [p for p in model.parameters() if p.requires_grad and (not natural or id(p) not in var_ids)]
    optimizers: list[torch.optim.Optimizer] = []
    if natural:
        optimizers.append(gpytorch.optim.NGD(list(dist.parameters()), num_data=num_data, lr=ngd_lr))
    if others:
        optimizers.append(torch.optim.Adam(others, lr=lr))

    if progress:  # tqdm.auto only when the bar is shown (see fit_gpx_model)
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm

    bernoulli = isinstance(model.likelihood, BernoulliLikelihood)
    scheme: str | None = None  # the label scheme of a Bernoulli likelihood, fixed by the first batch with a -1 or 0
    model.train()
    model.likelihood.train()
    history: list[float] = []
    try:
        # the bar counts epochs, its total num_epochs (one update per epoch)
        epochs = tqdm(range(num_epochs), total=num_epochs, desc="variational GPX fit (epochs)", disable=not progress)
        for _ in epochs:
            total, count = 0.0, 0
            for number, batch in enumerate(loader):
                if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
                    raise ValueError("Each batch must be (inputs, y) or (x, z, y).")
                if torch.is_tensor(batch[-1]) and batch[-1].dim() >= 1 and batch[-1].size(0) == 0:
                    raise ValueError(
                        f"Batch {number} of the DataLoader has zero rows; every minibatch needs at least one row "
                        "(check the sampler / drop_last settings)."
                    )
                inputs = model._make_inputs(batch[0], batch[1] if len(batch) == 3 else None)
                target = check_vector("y", batch[-1])
                check_same_rows(inputs=inputs, y=target)
                if target.dtype != inputs.dtype:
                    raise TypeError(f"y has dtype {target.dtype} but the model is {inputs.dtype}.")
                if bernoulli:
                    signs = bernoulli_label_signs(target)
                    scheme = _label_scheme(target, scheme, number)
                    # GPyTorch's BernoulliLikelihood (plain ELBO) takes {0, 1}; ours takes either
                    target = signs.add(1).div(2)
                for opt in optimizers:
                    opt.zero_grad()
                loss = -mll(model(inputs), target)
                loss.backward()
                for opt in optimizers:
                    opt.step()
                total += loss.item() * target.size(0)
                count += target.size(0)
            if count == 0:
                raise ValueError(
                    "The training data yielded no batches (an empty DataLoader or dataset): nothing to fit."
                )
            history.append(total / count)
    finally:
        model.eval()
        model.likelihood.eval()
    if history and not math.isfinite(history[-1]):
        warnings.warn(
            "Variational GPX fit ended with a non-finite loss; check the data scaling.",
            RuntimeWarning,
            stacklevel=2,
        )
    model.fit_history = history
    return model
