#!/usr/bin/env python3
r"""Peak memory of GPX's dense prediction path, in :math:`n \times n` copies, on the CPU.

Each configuration runs in its own subprocess. Two readings of the step's peak above the memory just before it:
the resident *anonymous* memory (``RssAnon`` of ``/proc/self/status``, where tensors live; polled every 0.5 ms by a
thread, so a short-lived row block may be missed, never an :math:`n \times n` buffer held for the factorisation), and
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` against the resident memory before (this one also counts the
file-backed pages of the shared libraries, which a busy machine may drop and reload: noisier). Large tensors are
``mmap``-ed by the allocator and returned at once, so the resident memory follows the live tensors. The excess,
divided by :math:`n^2` times the item size, is the number of :math:`n \times n` copies the step held at its peak.

Steps (``--what``):

* ``factor``: ``strategy.train_cholesky()`` of a fitted-size GPX model in eval mode: the in-place factor
  (:func:`gpytorch_explain.utils.dense_cholesky`, the default without autograd);
* ``old``: the same factor as before this path existed: linear_operator's ``covar.cholesky()`` of the dense
  :math:`\mathbf C` (``to_dense`` of the lazy operators, cached on them, then ``psd_safe_cholesky``);
* ``predict``: ``model.predict_weights(x_test)`` means and variances plus ``model(x_test)`` (z = x) means and
  variances, from a fresh model (factor, mean cache, latent and weight covariances of ``--m`` test points).

The estimate :func:`gpytorch_explain.utils.dense_path_bytes` (one buffer and ``DENSE_BLOCK_COPIES`` row blocks of the
``dense_rows`` budget) is printed beside the measurement.

Usage (as recorded in ``benchmarks/results/dense_path_memory.txt``)::

    PYTHONPATH=$PWD python benchmarks/dense_path_memory.py --runs factor:3000 old:3000 predict:3000 \
        factor:6000 old:6000 --block-elements 1048576
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

MIB = 2.0**20


def _rss_now() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _anon_now() -> float:
    """``RssAnon`` of ``/proc/self/status``: resident anonymous memory (tensors), without the file-backed pages of
    the shared libraries, which the kernel may drop and reload on a busy machine."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024.0
    return float("nan")


class _AnonPeak(threading.Thread):
    """Polls :func:`_anon_now` every ``interval`` seconds and keeps the largest value."""

    def __init__(self, interval: float = 5e-4):
        super().__init__(daemon=True)
        self.interval, self.peak, self._halt = interval, _anon_now(), threading.Event()

    def run(self):
        while not self._halt.is_set():
            self.peak = max(self.peak, _anon_now())
            time.sleep(self.interval)

    def stop(self) -> float:
        self._halt.set()
        self.join()
        self.peak = max(self.peak, _anon_now())
        return self.peak


def _peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def _one(what: str, n: int, args) -> dict:
    import gpytorch
    import torch

    from gpytorch_explain import GPXModel
    from gpytorch_explain import settings as S
    from gpytorch_explain.utils import dense_path_bytes

    torch.set_num_threads(args.threads)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, args.dims, generator=g, dtype=dtype)
    y = (torch.sin(x) * x).sum(-1) + 0.1 * torch.randn(n, generator=g, dtype=dtype)
    xt = torch.randn(args.m, args.dims, generator=g, dtype=dtype)
    model = GPXModel(x, y).eval()
    model.likelihood.noise = 0.05
    model.weight_noise = 0.05
    itemsize = torch.finfo(dtype).bits // 8
    res = {"what": what, "n": n, "dtype": args.dtype, "block_elements": args.block_elements}
    with (
        torch.no_grad(),
        S.max_block_elements(args.block_elements),
        S.max_cholesky_size(max(n, 5000)),
        gpytorch.settings.max_cholesky_size(max(n, 5000) if what == "old" else 0),
    ):
        if what in ("factor", "old"):
            strategy = model._build_prediction_strategy()  # lazy operators only: no factor, no mean cache
        estimate = dense_path_bytes(n, dtype)
        base, peak_before, anon_base = _rss_now(), _peak(), _anon_now()
        poll = _AnonPeak()
        poll.start()
        t0 = time.perf_counter()
        if what == "factor":
            L = strategy.train_cholesky()
            assert L.stride()[-2] == 1  # the column-major view of the one buffer
        elif what == "old":
            covar = strategy.lik_train_train_covar
            L = covar.cholesky().to_dense()
        else:
            post = model.predict_weights(xt)
            checksum = post.mean.sum() + post.variance.sum()
            f = model(xt)
            res["checksum"] = (checksum + f.mean.sum() + f.variance.sum()).item()
        res["seconds"] = time.perf_counter() - t0
        anon_peak = poll.stop()
        peak = _peak()
    nn = float(n) * n * itemsize
    res["baseline_mib"] = base / MIB
    res["peak_before_mib"] = peak_before / MIB
    res["peak_mib"] = peak / MIB
    res["copies"] = (peak - base) / nn
    res["anon_copies"] = (anon_peak - anon_base) / nn
    res["estimate_copies"] = estimate / nn
    res["hidden"] = peak_before > peak  # the step stayed below an earlier high-water mark: no measurement
    return res


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", default=["factor:3000", "old:3000", "predict:3000"])
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--dims", type=int, default=3)
    parser.add_argument("--m", type=int, default=200, help="test points of the predict step")
    parser.add_argument("--block-elements", type=int, default=2**24, help="settings.max_block_elements")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        what, n = args.child.split(":")
        print(json.dumps(_one(what, int(n), args)))
        return
    print(
        f"# GPX dense prediction path, {args.dtype}, D = d = {args.dims}, max_block_elements = {args.block_elements} "
        f"(dense_rows = {args.block_elements // 4}), {args.threads} thread(s), m = {args.m} test points (predict)"
    )
    for run in args.runs:
        cmd = [sys.executable, __file__, "--child", run, "--dtype", args.dtype, "--dims", str(args.dims)]
        cmd += ["--m", str(args.m), "--block-elements", str(args.block_elements), "--threads", str(args.threads)]
        # a fixed mmap threshold: glibc then maps every allocation above 128 KiB on its own and unmaps it when freed,
        # so freed blocks do not stay resident and get reused unseen (its default threshold grows to 32 MiB)
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode:
            print(f"{run}: failed\n{out.stderr[-2000:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        flag = " (below an earlier high-water mark: not measured)" if r["hidden"] else ""
        print(
            f"{r['what']:>8} n={r['n']:>6}: {r['anon_copies']:.2f} n x n copies (RssAnon, polled), "
            f"{r['copies']:.2f} (ru_maxrss{flag}); estimate dense_path_bytes {r['estimate_copies']:.2f}; "
            f"baseline RSS {r['baseline_mib']:.0f} MiB, peak {r['peak_mib']:.0f} MiB, {r['seconds']:.1f} s"
        )


if __name__ == "__main__":
    main()
