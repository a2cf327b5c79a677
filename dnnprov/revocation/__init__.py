"""Revocation handling, the system's fourth part: the spot-notice detector and re-planning
(``replan``), launch policies (``policies``, ``replan_policy``: the objects the control loop of
:mod:`dnnprov.control` asks, for ``dnnprov run`` and ``dnnprov simulate``), availability models
fitted from traces (``availability``), the traces checked for a replay and ``mpc``'s table
(``pool_replay``), the progress model's speeds and replay checks (``simulate``), hindsight lower
bounds (``hindsight``) and the plan chosen under a policy (``plan_choice``)."""
