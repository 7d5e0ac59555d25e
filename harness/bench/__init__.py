"""Benchmarks that run workloads alone on the machine: `harness price` (pricing) and `harness
exposure-cost`; they read and write bench records through harness.analysis."""
