r"""How :class:`~gpytorch_explain.local.LocalGPExplainer` chooses its samples: the initial design, the
acquisition's maximiser (BoTorch's ``optimize_acqf``, or ``optimize_acqf_mixed`` with categorical features), greedy
batches with fantasised observations, categorical coordinates at seen values, and the replacement of proposals that
repeat a sample.

A deterministic black box called twice on one row adds no information, and repeated rows leave the attribution
surrogate with fewer distinct points than features; so a proposal within ``_DUPLICATE_TOL`` (max-norm, box units)
of a row already sampled is replaced (see :meth:`_ProposalMixin._propose`) and counted in ``result.warnings``.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from botorch.optim import optimize_acqf, optimize_acqf_mixed
from botorch.utils.sampling import draw_sobol_samples
from gpytorch.utils.warnings import NumericalWarning

from .acquisition import make_acquisition
from .stencil import stencil_rows

_DT = torch.float64
#: a proposed point this close (max-norm, box units) to a sample already taken counts as a repeat
_DUPLICATE_TOL = 1e-6
#: an all-categorical space with at most this many combinations of seen values is enumerated to find unsampled rows
_MAX_ENUMERATED_COMBOS = 4096
#: otherwise this many random combinations are searched for one not sampled yet
_RANDOM_COMBOS = 512


def _is_repeat(cand: torch.Tensor, seen: torch.Tensor) -> bool:
    """Whether the ``(1, d)`` point ``cand`` is within ``_DUPLICATE_TOL`` (max-norm, box units) of a row of ``seen``."""
    return bool(len(seen)) and bool((seen - cand).abs().amax(-1).min() < _DUPLICATE_TOL)


def _posterior_var(model, U: torch.Tensor) -> torch.Tensor:
    """The posterior variance of ``model`` at each row of ``U``."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Negative variance", category=NumericalWarning)
        return model.posterior(U).variance.reshape(-1)


class _ProposalMixin:
    """The sampling half of :class:`~gpytorch_explain.local.LocalGPExplainer` (its attributes: ``acquisition``,
    ``jitter``, ``exploration_weight``, ``num_mc_points``, ``num_restarts``, ``raw_samples``,
    ``num_categorical_candidates``, ``categorical_values``, and the ``_to_u``/``_to_user`` box transforms)."""

    def _initial_design(self, x: np.ndarray, scale: np.ndarray, cat_pos: dict[int, int], d: int, rng) -> np.ndarray:
        """The rows of the first call after ``x`` (user units): the stencil's (if any), then ``n_initial``
        scrambled-Sobol points of the box with categorical features drawn from their seen values (distinct rows
        when only categorical features vary)."""
        U_init = draw_sobol_samples(
            bounds=torch.stack([-torch.ones(d), torch.ones(d)]).to(_DT),
            n=self.n_initial,
            q=1,
            seed=int(rng.randint(0, 2**31 - 1)),
        ).squeeze(-2)
        X_init = self._to_user(U_init, x, scale)
        for c in self.categorical_features:
            if c in self.active:
                X_init[:, c] = rng.choice(self.categorical_values[c], size=self.n_initial)
        if cat_pos and len(cat_pos) == d:  # only categorical features vary: no row of the design repeats another
            X_init = self._distinct_initial_rows(x, X_init, cat_pos, scale, rng)
        if self.stencil is not None:  # difference points x ± δ e_i or x + δ e_i (box units), continuous features
            cont = [p for p in range(d) if p not in cat_pos]
            U_st = stencil_rows(self.stencil, self.stencil_kind, d, cont, dtype=_DT)
            X_st = self._to_user(U_st, x, scale)
            # a finite difference moves one continuous feature: the categories stay x's own (seen or not)
            X_st[:, self.categorical_features] = x[self.categorical_features]
            X_init = np.vstack([X_st, X_init])
        return X_init

    def _propose(self, model, u0, bounds, q, cat_pos, x, scale, rng) -> torch.Tensor:
        """``q`` new points in box units, chosen greedily (fantasies with the posterior mean in between).

        A point that repeats one already sampled (within ``1e-6`` box units; EI and PI do this once the surrogate
        is sure of the incumbent) is replaced by the point of maximum posterior std: a repeated call of a
        deterministic black box adds no information, and repeats leave the attribution surrogate with fewer
        distinct points than features. When only categorical features are perturbed the space is finite and the
        acquisition scores a few combinations, so the replacement is the combination of maximum posterior std
        among those not sampled yet (all of them when there are at most ``_MAX_ENUMERATED_COMBOS``); once every
        combination has been sampled the repeat is kept. Both are reported in ``result.warnings``. If the
        maximum-std point itself repeats a sample (mixed or continuous features), the one of maximum posterior std
        among ``_RANDOM_COMBOS`` random unsampled points of the box is taken.
        """
        combos = self._categorical_combos(cat_pos, x, scale, rng)
        all_categorical = bool(combos) and len(cat_pos) == u0.numel()
        cur = model
        chosen = []
        for j in range(q):
            acq = make_acquisition(
                self.acquisition,
                cur,
                u0,
                bounds,
                jitter=self.jitter,
                exploration_weight=self.exploration_weight,
                num_mc_points=self.num_mc_points,
                seed=int(rng.randint(0, 2**31 - 1)),
            )
            seen = torch.cat([model.train_inputs[0], *chosen], dim=0)  # len(seen): the proposal's row index
            if all_categorical:  # only categorical features vary: score the combinations
                rng.randint(0, 2**31 - 1)  # the optimiser's seed, unused here (keeps the random stream unchanged)
                pts = torch.tensor([[combo[p] for p in range(u0.numel())] for combo in combos], dtype=_DT)
                with torch.no_grad():
                    cand = self._snap(pts[int(acq(pts.unsqueeze(-2)).argmax())].unsqueeze(0), cat_pos, x, scale)
                if _is_repeat(cand, seen):
                    free = self._unsampled_combinations(seen, cat_pos, x, scale, rng)
                    if len(free):
                        self._replaced.append(len(seen))
                        cand = free[int(_posterior_var(cur, free).argmax())].unsqueeze(0)
                    else:  # every combination has been sampled: the repeat is unavoidable
                        self._exhausted.append(len(seen))
            else:
                cand = self._snap(self._maximise(acq, bounds, combos, rng), cat_pos, x, scale)
                if _is_repeat(cand, seen):
                    self._replaced.append(len(seen))
                    var_acq = make_acquisition("variance", cur, u0, bounds)
                    cand = self._snap(self._maximise(var_acq, bounds, combos, rng), cat_pos, x, scale)
                    if _is_repeat(cand, seen):  # the optimiser found no better point: the best of random unsampled
                        free = self._random_points(cat_pos, x, scale, rng, u0.numel())
                        free = free[torch.cdist(free, seen, p=float("inf")).amin(-1) >= _DUPLICATE_TOL]
                        if len(free):
                            cand = free[int(_posterior_var(cur, free).argmax())].unsqueeze(0)
            cand = cand.detach().reshape(1, -1)
            chosen.append(cand)
            if j < q - 1:
                with torch.no_grad():
                    fantasy = cur.posterior(cand).mean
                cur = cur.condition_on_observations(cand, fantasy)
        return torch.cat(chosen, dim=0)

    def _category_codes(self, cat_pos, x, scale) -> dict[int, np.ndarray]:
        """Box-unit codes of each categorical feature's seen values, by position in the active features."""
        return {p: (self.categorical_values[c] - x[c]) / scale[p] for p, c in cat_pos.items()}

    def _snap(self, U: torch.Tensor, cat_pos, x, scale) -> torch.Tensor:
        """``U`` with each categorical coordinate moved to the code of the nearest seen value (what ``_to_user``
        evaluates; a no-op for codes of seen values, which proposals use unless ``x``'s own value is unseen)."""
        if not cat_pos:
            return U
        U = U.clone()
        for p, codes in self._category_codes(cat_pos, x, scale).items():
            U[:, p] = torch.as_tensor(codes, dtype=_DT)[(U[:, p, None] - torch.as_tensor(codes)).abs().argmin(-1)]
        return U

    def _unsampled_combinations(self, seen: torch.Tensor, cat_pos, x, scale, rng) -> torch.Tensor:
        """Combinations of seen categorical values (box units, ``(k, d)``; every active feature categorical) that
        differ from every row of ``seen``: all such when there are at most ``_MAX_ENUMERATED_COMBOS``
        combinations, else those among ``_RANDOM_COMBOS`` random ones."""
        codes = self._category_codes(cat_pos, x, scale)
        cols = [torch.as_tensor(codes[p], dtype=_DT) for p in range(len(codes))]
        if np.prod([c.numel() for c in cols], dtype=float) <= _MAX_ENUMERATED_COMBOS:
            cands = torch.cartesian_prod(*cols).reshape(-1, len(cols))
        else:
            cands = torch.stack([c[torch.as_tensor(rng.randint(0, c.numel(), _RANDOM_COMBOS))] for c in cols], -1)
        if not len(seen):
            return cands
        return cands[torch.cdist(cands, seen, p=float("inf")).amin(-1) >= _DUPLICATE_TOL]

    def _random_points(self, cat_pos, x, scale, rng, d: int) -> torch.Tensor:
        """``_RANDOM_COMBOS`` uniform points of the box (box units), categorical coordinates at seen values."""
        U = torch.as_tensor(rng.uniform(-1.0, 1.0, size=(_RANDOM_COMBOS, d)), dtype=_DT)
        for p, codes in self._category_codes(cat_pos, x, scale).items():
            U[:, p] = torch.as_tensor(codes[rng.randint(0, codes.size, _RANDOM_COMBOS)], dtype=_DT)
        return U

    def _distinct_initial_rows(self, x, X_init: np.ndarray, cat_pos, scale, rng) -> np.ndarray:
        """The initial design with each row that repeats ``x`` or an earlier row redrawn among the unsampled
        combinations (only categorical features perturbed); a repeat left when none is left is recorded."""
        X_init = X_init.copy()
        for i in range(len(X_init)):
            seen = self._to_u(np.vstack([x[None, :], X_init[:i]]), x, scale)
            row = self._to_u(X_init[i : i + 1], x, scale)
            if not _is_repeat(row, seen):
                continue
            free = self._unsampled_combinations(seen, cat_pos, x, scale, rng)
            if len(free):
                X_init[i] = self._to_user(free[int(rng.randint(0, len(free)))].unsqueeze(0), x, scale)[0]
            else:
                self._exhausted.append(1 + i)
        return X_init

    def _maximise(self, acq, bounds, combos, rng) -> torch.Tensor:
        """BoTorch's ``optimize_acqf`` (``optimize_acqf_mixed`` with categorical features) for one point."""
        opts = {"maxiter": 50, "seed": int(rng.randint(0, 2**31 - 1))}
        if not combos:
            cand, _ = optimize_acqf(
                acq,
                bounds=bounds,
                q=1,
                num_restarts=self.num_restarts,
                raw_samples=self.raw_samples,
                options=opts,
                retry_on_optimization_warning=False,
            )
        else:
            cand, _ = optimize_acqf_mixed(
                acq,
                bounds=bounds,
                q=1,
                num_restarts=self.num_restarts,
                raw_samples=self.raw_samples,
                fixed_features_list=combos,
                options=opts,
                retry_on_optimization_warning=False,
            )
        return cand.detach().reshape(1, -1)

    def _categorical_combos(self, cat_pos, x, scale, rng) -> list[dict[int, float]]:
        if not cat_pos:
            return []
        combos = [{p: 0.0 for p in cat_pos}]  # x's own values
        for _ in range(self.num_categorical_candidates - 1):
            combos.append(
                {p: float((rng.choice(self.categorical_values[c]) - x[c]) / scale[p]) for p, c in cat_pos.items()}
            )
        unique = []
        for c in combos:
            if c not in unique:
                unique.append(c)
        return unique

    def _proposal_messages(self, cat_pos: dict[int, int], d: int) -> list[str]:
        """``result.warnings``' lines for the proposals replaced because they repeated a sample (``self._replaced``)
        and the rows that had to repeat one (``self._exhausted``: every combination of an all-categorical space
        sampled)."""
        messages = []
        all_cat = bool(cat_pos) and len(cat_pos) == d
        if self._replaced:
            at = ", ".join(map(str, self._replaced[:10])) + (", ..." if len(self._replaced) > 10 else "")
            messages.append(
                f"acquisition: '{self.acquisition}' proposed a point already sampled {len(self._replaced)} time(s) "
                f"(at n = {at}); the {'unsampled combination' if all_cat else 'point'} of maximum posterior std "
                "was taken instead, since a repeated call adds nothing for a deterministic black box"
            )
        if self._exhausted:
            at = ", ".join(map(str, self._exhausted[:10])) + (", ..." if len(self._exhausted) > 10 else "")
            n_combos = np.prod([self.categorical_values[c].size for c in cat_pos.values()], dtype=float)
            why = (
                f"all {int(n_combos)} combinations of their seen values had been sampled"
                if n_combos <= _MAX_ENUMERATED_COMBOS
                else f"none of {_RANDOM_COMBOS} random combinations of their seen values was unsampled"
            )
            messages.append(
                f"repeated rows: only categorical features are perturbed and {why}, so {len(self._exhausted)} "
                f"row(s) repeat a sampled one (at n = {at}), which adds nothing for a deterministic black box; a "
                "budget above the number of distinct rows is wasted"
            )
        return messages
