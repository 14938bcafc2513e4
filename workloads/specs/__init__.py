"""Pure spec builders: typed settings in, complete Kubernetes objects (dicts) out.

Nothing under this package imports pulumi (a test checks it in a fresh interpreter), so the
renderer, the local runner and the tests build the exact objects the stack applies.
"""
