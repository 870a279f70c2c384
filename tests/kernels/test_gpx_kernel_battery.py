"""GPyTorch's BaseKernelTestCase for GPXKernel, in float64, with z = x and with separate explanation features.

The battery checks the kernel's GPyTorch contract (batches of inputs and of hyperparameters, ``diag=True``,
``active_dims``, indexing a batch kernel, pickling, dtype/device). Values against the dense GPX covariance are in
test_gpx_kernel.py.
"""

import unittest

import torch
from gpytorch.kernels import RBFKernel
from gpytorch.test.base_kernel_test_case import BaseKernelTestCase

from gpytorch_explain import GPXKernel


class TestGPXKernel(BaseKernelTestCase, unittest.TestCase):
    """z = x: every input column is both a kernel input and an explanation feature."""

    seed = 0
    num_dims = 2  # the batch cases' inputs have 2 columns

    def setUp(self):
        self._default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        super().setUp()

    def tearDown(self):
        super().tearDown()
        torch.set_default_dtype(self._default_dtype)

    def _gpx(self, base, num_dims, **kwargs):
        return GPXKernel(base, x_dims=num_dims, **kwargs)

    def create_kernel_no_ard(self, batch_shape=(), num_dims=None, **kwargs):
        active = kwargs.get("active_dims")
        num_dims = num_dims or (len(active) if active is not None else self.num_dims)
        return self._gpx(RBFKernel(batch_shape=torch.Size(batch_shape)), num_dims, **kwargs)

    def create_kernel_ard(self, num_dims, batch_shape=(), **kwargs):
        x_dims = num_dims if type(self) is TestGPXKernel else num_dims - 1
        return self._gpx(RBFKernel(ard_num_dims=x_dims, batch_shape=torch.Size(batch_shape)), num_dims, **kwargs)

    # The active_dims cases compare with a kernel on the sliced inputs, whose column count (4 and 6 here) GPXKernel
    # must be told (x_dims); the reference kernel is built for that width. Same check as the battery's.
    def _check_active_dims(self, dims):
        kernel = self.create_kernel_no_ard(active_dims=dims)
        x = self.create_data_no_batch()
        res = kernel(x).evaluate_kernel().to_dense()
        expected = self.create_kernel_no_ard(num_dims=len(dims))(x[:, dims]).evaluate_kernel().to_dense()
        self.assertAllClose(res, expected, rtol=1e-3, atol=1e-5)

    def test_active_dims_list(self):
        self._check_active_dims([0, 2, 4, 6])

    def test_active_dims_range(self):
        self._check_active_dims(list(range(3, 9)))


class TestGPXKernelSeparateZ(TestGPXKernel):
    """Rows [x | z]: the last column is the explanation feature z, the others the kernel inputs x."""

    def _gpx(self, base, num_dims, **kwargs):
        return GPXKernel(base, x_dims=num_dims - 1, z_dims=1, **kwargs)
