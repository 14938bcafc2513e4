"""The EKS GPU cluster as Pulumi components.

This package's ``__init__`` imports nothing: ``infra.instances``, ``infra.versions`` and
``infra.config`` are pure Python (no pulumi import at module level) so the training package,
the spec builders and the planner can read them without the Pulumi SDK.
"""
