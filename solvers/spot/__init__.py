"""The exact spot decomposition: cells of the quota box, their bounds, incumbents and exact evaluation.

:mod:`.exact` drives the search; :mod:`.terms` holds what every part reads (model, bound
constants, cluster shapes); :mod:`.cells` defines cells and safe arithmetic; :mod:`.bounds`
bounds a cell's cost from below (with :mod:`.cc` for the convergence term and :mod:`.lp` for the
Charnes-Cooper relaxations); :mod:`.incumbents` proposes plans; :mod:`.side` reads the user's side
rows. Each part is an object built with what it uses, composed by the search.
"""
