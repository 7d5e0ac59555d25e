"""Many trials: three engines side by side over one worker loop.

- `matrix/`: matrix specs and presets, their expansion into trials, the pool's order, stop rules
  and GPU slots, the live progress (`harness matrix`);
- `stress/`: a user's command run over and over, its fix arms side by side (`harness stress`);
- `hunt/`: a user's pytest suite run in threads, its verdicts per test (`harness hunt`);

over what they share: `loop` (the worker loop), `backends` (this host via `local`, or Ray tasks
via `ray_backend`), `arms` (the fix arms of stress and hunt), `bytecode_cache`; and the commands
that rerun or cut one trial (`replay`, `shrink`) or measure a plan's lift (`lift`, `calibration`).
"""
