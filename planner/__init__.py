"""Capacity planner: memory, step time, epoch time and cost of FSDP2 fine-tuning on EC2 GPUs.

Imports no torch and no Pulumi: it runs anywhere, instantly. Entry point: ``eks-fsdp
plan``; formulas and assumptions: docs/planner.md.
"""
