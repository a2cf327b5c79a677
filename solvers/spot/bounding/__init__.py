"""What a cell's plans cost at least: the cell bounds (:mod:`.bounds`) over the convergence-term
bounds (:mod:`.cc`) and the Charnes-Cooper LP relaxations (:mod:`.lp`)."""
