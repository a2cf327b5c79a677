"""Revocation handling, the system's fourth part: the spot-notice detector and re-planning
(``replan``), launch policies (``policies``), availability models fitted from traces
(``availability``), trace replay (``simulate``, ``pool_replay``), hindsight lower bounds
(``hindsight``) and the choice of a plan under a policy (``plan_choice``)."""
