"""Why an instance has no plan: the method (:mod:`.infeasibility`) and its reasons for spot,
serverless and joint problems, over the bookkeeping of :mod:`.search`."""
