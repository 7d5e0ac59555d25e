"""Operating scripts of the campaign, kept apart from results/ (which holds data only).

Run from the repository root: the Python ones as modules (`python -m tools.call_trials 45`), the
shell ones with bash (`bash tools/h200_call.sh SECONDS PHASE...`, on the GPU host).
"""
