"""Result stores: the append-only record of trials and their artefacts, and the maintenance
commands that act on whole stores (pack, merge, retire, resign)."""
