"""FSDP2 fine-tuning of Llama-family models (python -m training.finetune, launched by torchrun)."""
