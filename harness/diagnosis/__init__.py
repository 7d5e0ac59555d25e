"""Diagnosis: the catalogue of known races, matching failures to it, and what the installed torch means for threads."""
