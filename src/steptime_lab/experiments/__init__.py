"""Experiment logic shared by the pipeline scripts (one module per experiment family)."""
