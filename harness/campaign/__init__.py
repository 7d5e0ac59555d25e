"""Many trials: matrix specs and presets, their expansion into trials, the worker pool and its
GPU slots, and the commands that run trials (matrix, stress, replay, shrink, lift)."""
