"""`harness matrix`: specs (`spec`, `specfile`, `presets`; the JSON presets in ../specs/), their
expansion into trials (`expand`), what is pending and how it packs (`planning`, `slots`), the
pool's take (`pool`: order, stop rules, GPU slots) over the campaign's loop, `run` (`run_matrix`)
and the live lines (`progress`)."""
