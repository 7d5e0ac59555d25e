"""One trial: what it runs (spec), running it in an isolated subprocess (runner, bootstrap),
how it ended (outcome), and the evidence it leaves: failure signatures, hang dumps, native
stacks and GPU memory."""
