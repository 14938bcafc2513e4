"""``eks-fsdp``: one command line over the project's commands (``eks_fsdp_cli.main``), and the
one error format every command prints (``eks_fsdp_cli.errors``)."""
