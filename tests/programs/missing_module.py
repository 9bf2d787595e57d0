"""Imports a torch module graphgrad does not have: under graphgrad the run must stop here
with an error naming it; under PyTorch it runs on."""

import torch
import torch.ao.quantization

print(f"imported {torch.ao.quantization.__name__}")
