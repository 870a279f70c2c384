"""GPyTorch's BaseKernelTestCase for PartitionedKernel (an RBF base computed in row blocks), in float64.

The battery checks the kernel's GPyTorch contract (batches of inputs and of hyperparameters, ``diag=True``,
``active_dims``, indexing a batch kernel, pickling, dtype/device), with blocks small enough that every
evaluation runs in several row blocks. Agreement with the plain kernel is in test_partitioned_kernel.py.
"""

import unittest

import torch
from gpytorch.kernels import RBFKernel
from gpytorch.test.base_kernel_test_case import BaseKernelTestCase

from gpytorch_explain.kernels import PartitionedKernel
from gpytorch_explain.operators.partitioned_kernel_linear_operator import max_block_elements


class TestPartitionedKernel(BaseKernelTestCase, unittest.TestCase):
    seed = 0

    def setUp(self):
        self._default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        self._block = max_block_elements(64)  # a few rows per block for every input here
        self._block.__enter__()
        super().setUp()

    def tearDown(self):
        super().tearDown()
        self._block.__exit__()
        torch.set_default_dtype(self._default_dtype)

    def create_kernel_no_ard(self, batch_shape=(), **kwargs):
        return PartitionedKernel(RBFKernel(batch_shape=torch.Size(batch_shape)), **kwargs)

    def create_kernel_ard(self, num_dims, batch_shape=(), **kwargs):
        return PartitionedKernel(RBFKernel(ard_num_dims=num_dims, batch_shape=torch.Size(batch_shape)), **kwargs)

    def test_matches_the_base_kernel(self):
        base = RBFKernel(batch_shape=torch.Size([2]))
        base.lengthscale = torch.tensor([[[0.7]], [[1.3]]])
        x = torch.randn(2, 20, 3)
        torch.testing.assert_close(PartitionedKernel(base)(x).to_dense(), base(x).to_dense(), rtol=0, atol=1e-12)
