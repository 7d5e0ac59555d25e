"""The seeded fault-injecting scheduler: plans, named profiles that derive a plan from a seed,
and the named points inside torch where a plan acts (`stage.event`)."""
