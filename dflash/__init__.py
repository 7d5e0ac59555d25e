"""The DFlash trainer: the harness's real workload."""

# Its fault points are named before anything can parse a plan that names them.
from dflash import fault_points  # noqa: F401
