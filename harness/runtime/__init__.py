"""What runs inside the program under test: the fix registry and the sets measured clean
(`fixes`, `fixes.recommended_sets`), the public fix API (`guard.Guard`), the named fault points a
program registers and calls (`failpoints`), the thread-exit helper and their errors.

The bottom of the project: it imports neither the trainer (`dflash`) nor the rest of the harness,
so a program that wants a fix imports this package alone (`from harness.runtime.guard import
Guard`), and the trainer, the harness, the repro scripts and the examples build on it.
"""
