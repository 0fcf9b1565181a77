"""meshdma: the JAX Pallas TPU distributed programming model on CPUs.

The Python package holds meshdma's PyTorch integration: ``import
meshdma.torch`` registers the torch.distributed backend ``"meshdma"``
(docs/torch.md).
"""
