"""Fine-tuning jobs apart from the cluster: job files and ``eks-fsdp jobs``.

A job file (``jobs.schema``) names the stack it runs on and what to train; the CLI submits it to
the cluster the stack built (``kubernetes`` client) or runs it on this machine (``localrun``),
and lists, follows, cancels and resumes jobs. No Pulumi and no torch are imported here.
"""
