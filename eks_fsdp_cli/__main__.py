"""``python -m eks_fsdp_cli`` is ``eks-fsdp``."""

from eks_fsdp_cli.main import entry

entry()
