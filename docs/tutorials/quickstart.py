# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Quick start: one explained prediction
#
# GPX fits a GP regression whose every prediction is a local linear model; here on synthetic data with three
# features. The run uses fewer rows when `GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1` (the docs build and CI).

# %%
import os

import matplotlib.pyplot as plt
import torch

from gpytorch_explain import GPXModel

small = os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_SMALL") == "1"
n = 100 if small else 1000
torch.manual_seed(0)
x = torch.rand(n, 3, dtype=torch.float64) * 2 - 1
y = x[:, 0] * torch.sin(3 * x[:, 1]) + 0.5 * x[:, 2] + 0.05 * torch.randn(n, dtype=torch.float64)

# %% [markdown]
# Fit by L-BFGS on the exact marginal likelihood, then explain the first five rows.

# %%
model = GPXModel(x, y, feature_names=["a", "b", "c"]).fit()
explanation = model.explain(x[:5])
print(explanation.summary(0))

# %% [markdown]
# The contributions $w_l z_l$ add up to the latent prediction; the error bars are ±1 posterior std (latent).

# %%
explanation.plot(0)
plt.show()
