"""Operating scripts of the campaign, kept apart from results/ (which holds data only).

Run from the repository root: the Python ones as modules (`python -m tools.run_trials 45`), the
shell ones with bash (`bash tools/h200_run.sh SECONDS PHASE...`, on the GPU host).
"""
