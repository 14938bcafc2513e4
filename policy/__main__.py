"""The eks-fsdp policy pack: ``pulumi preview --policy-pack policy`` (and ``up``) enforce it.

Every rule lives in ``rules.py``, importable without this call (the tests run the same objects
offline against the resources the program registers under mocks).
"""

from pulumi_policy import EnforcementLevel, PolicyPack
from rules import POLICIES

PolicyPack(
    name="eks-fsdp-security",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=POLICIES,
)
