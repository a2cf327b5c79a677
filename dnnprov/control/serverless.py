"""λDNN plans run: the PS on EC2, the plan's functions on Lambda, restarts at the timeout.

A run (docs/control.md, "Serverless runs") is a sequence of recorded steps:

0. ``ps``: launch the plan's PS count of ``platform.ps_type`` on-demand through
   :class:`~dnnprov.control.clouds.ec2.Ec2Cloud` (ClientToken ``RUN-0``, tagged by run);
1. ``configure``: the function's ``MemorySize`` (the plan's m) and ``Timeout`` (the
   problem's ``timeout_s``), and ``n`` reserved concurrency;
2. ``invoke`` (one step per segment attempt): the n functions invoked at once with the
   plan's local batch, the PS address and the last checkpoint; each runs until the
   timeout (less the checkpoint margin) and answers its report and new checkpoint. The next
   segment restarts from it, the model's restart rule (docs/models.md). Each invocation
   carries the token ``RUN-STEP-WORKER`` in its payload: re-sent after a crash, it runs once;
3. ``teardown``: the PS terminated, the reserved concurrency deleted.

Every step is written to the :class:`~dnnprov.control.record.RunRecord` before it is sent
and marked done with what it got, so :func:`resume_serverless` goes on after a kill.
The run's time is the trainer's (the workers' reports); its cost is what Lambda bills
(GB-seconds of the invocations' durations and one request each) plus the PS for the run.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from dnnprov.cloud.aws import CloudError, check_endpoint_url, check_member, check_region
from dnnprov.control.cloud import Instance, LaunchRequest
from dnnprov.control.clouds.ec2 import PLACEHOLDER_IMAGE, Ec2Cloud, RemoteTwinClock, is_twin
from dnnprov.control.loop import Event
from dnnprov.control.record import RunRecord
from dnnprov.errors import InvalidInputError
from dnnprov.models.serverless import ServerlessModel
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.result import ServerlessPlan

#: Attempts of one segment (a failed invocation is retried from the same checkpoint).
ATTEMPTS = 3
DEFAULT_FUNCTION = "dnnprov-worker"


@dataclass
class ServerlessOutcome:
    """How a serverless run ended."""

    state: str  # met, missed, gave-up, failed, cancelled
    finish_s: float | None  # when the trainer reported the target (None: not reached)
    time_s: float  # the run's time (its last report)
    segments: int  # function launches (segments trained)
    restarts: int  # segments - 1
    invocations: int
    cost: float
    predicted_time_s: float
    predicted_launches: int
    loss: float = 1.0  # the last report's loss (the share of the work left)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (record, ``--json``)."""
        return {
            "kind": "serverless",
            "state": self.state,
            "finish_s": self.finish_s,
            "time_s": self.time_s,
            "segments": self.segments,
            "restarts": self.restarts,
            "invocations": self.invocations,
            "cost": self.cost,
            "predicted_time_s": self.predicted_time_s,
            "predicted_launches": self.predicted_launches,
            "loss": self.loss,
            "errors": self.errors,
        }


def check_plan(problem: ServerlessProblem, plan: ServerlessPlan) -> None:
    """Refuse a plan the problem cannot run (one clear error)."""
    if not isinstance(problem, ServerlessProblem):
        raise InvalidInputError("INSTANCE", "a serverless run needs a serverless instance")
    low, high = problem.function_range()
    if not (isinstance(plan.functions, int) and low <= plan.functions <= high):
        raise InvalidInputError(
            "plan.functions",
            f"{plan.functions!r} is outside {low}-{high} (constraints.functions / platform.concurrency_limit)",
        )
    if plan.memory_mb not in problem.memory_grid():
        raise InvalidInputError("plan.memory_mb", f"{plan.memory_mb!r} MB is not on the instance's memory grid")
    ps_low, ps_high = problem.constraints.ps_count
    if not (isinstance(plan.ps, int) and ps_low <= plan.ps <= ps_high):
        raise InvalidInputError("plan.ps", f"{plan.ps!r} PS is outside {ps_low}-{ps_high} (constraints.ps_count)")
    if not (plan.local_batch >= 1 and math.isfinite(plan.local_batch)):
        raise InvalidInputError("plan.local_batch", f"{plan.local_batch!r}: a function needs at least one sample")
    if problem.platform.timeout_s != int(problem.platform.timeout_s) or not 1 <= problem.platform.timeout_s <= 900:
        raise InvalidInputError(
            "platform.timeout_s", f"Lambda takes a whole number of seconds in 1-900, got {problem.platform.timeout_s:g}"
        )


def prediction(problem: ServerlessProblem, plan: ServerlessPlan) -> tuple[float, int, float]:
    """The model's (time, launches, cost) for the plan with its local batch."""
    ev = ServerlessModel(problem).evaluate([plan.functions], [plan.memory_mb], [plan.ps], local_batch=plan.local_batch)
    return float(ev.time_s[0]), int(ev.launches[0]), float(ev.cost[0])


class ServerlessRun:
    """One recorded serverless run's controller (module docstring)."""

    def __init__(self, record: RunRecord, run_id: str) -> None:
        from dnnprov.io.instances import problem_from_dict

        self.record, self.run_id = record, run_id
        spec = record.get(run_id)["spec"]
        self.spec = spec
        problem = problem_from_dict(spec["problem"])
        if not isinstance(problem, ServerlessProblem):
            raise InvalidInputError(
                f"{run_id}.problem", f"a serverless run needs a serverless problem, got {type(problem).__name__}"
            )
        self.problem = problem
        self.plan = ServerlessPlan(**spec["plan"])
        check_plan(self.problem, self.plan)
        self.function = spec["function"]
        clock = RemoteTwinClock(spec["lambda_endpoint_url"]) if spec.get("twin") else None
        known = [
            Instance.from_dict(i) for s in record.steps(run_id) if s["result"] for i in s["result"].get("instances", [])
        ]
        self.ec2 = Ec2Cloud(
            spec["region"],
            start_epoch=spec["start_epoch"],
            endpoint_url=spec.get("endpoint_url"),
            clock=clock,
            image_id=spec["image_id"],
            known=known,
        )
        timeout = self.problem.platform.timeout_s
        config = Config(
            retries={"total_max_attempts": 1},
            connect_timeout=5,
            read_timeout=timeout + 60,
            max_pool_connections=self.plan.functions,
        )
        self.aws_lambda = boto3.Session().client(
            "lambda", region_name=spec["region"], endpoint_url=spec.get("lambda_endpoint_url"), config=config
        )

    # ------------------------------------------------------------------ steps
    def _step(self, kind: str, payload: dict[str, Any], send: Any) -> dict[str, Any]:
        """Write a step, send it, mark it done (a pending intent of this kind is re-sent as is)."""
        steps = self.record.steps(self.run_id)
        if steps and steps[-1]["status"] == "intent" and steps[-1]["kind"] != kind:
            self.record.done(self.run_id, steps[-1]["step"], {"abandoned": True})  # it failed; we moved on
        elif steps and steps[-1]["status"] == "intent":
            step, payload = steps[-1]["step"], steps[-1]["payload"]
            result = send(payload)
            self.record.done(self.run_id, step, result)
            return result
        step = (steps[-1]["step"] + 1) if steps else 0
        payload = {**payload, "step": step}
        self.record.intend(self.run_id, step, kind, payload)
        result = send(payload)
        self.record.done(self.run_id, step, result)
        return result

    def _event(self, time_s: float, kind: str, **detail: Any) -> None:
        self.record.event(self.run_id, Event(time_s, kind, detail))

    def _launch_ps(self, payload: dict[str, Any]) -> dict[str, Any]:
        request = LaunchRequest.from_dict(payload["request"])
        outcome = self.ec2.launch(request)
        if outcome.error_code:
            raise CloudError(
                "aws ec2:RunInstances",
                f"the PS launch was refused ({outcome.error_code}: {outcome.message})",
                outcome.error_code,
            )
        return {"instances": [i.to_dict() for i in outcome.instances]}

    def _configure(self, payload: dict[str, Any]) -> dict[str, Any]:
        self._lambda(
            "UpdateFunctionConfiguration",
            FunctionName=self.function,
            MemorySize=payload["memory_mb"],
            Timeout=payload["timeout_s"],
        )
        self._lambda(
            "PutFunctionConcurrency", FunctionName=self.function, ReservedConcurrentExecutions=payload["functions"]
        )
        got = self._lambda("GetFunction", FunctionName=self.function)["Configuration"]
        if got.get("MemorySize") != payload["memory_mb"] or got.get("Timeout") != payload["timeout_s"]:
            raise CloudError(
                "aws lambda:UpdateFunctionConfiguration",
                f"the function has {got.get('MemorySize')} MB and {got.get('Timeout')} s after the update",
            )
        return {"memory_mb": got["MemorySize"], "timeout_s": got["Timeout"]}

    def _invoke_all(self, payload: dict[str, Any]) -> dict[str, Any]:
        n = payload["functions"]

        def one(worker: int) -> dict[str, Any]:
            body = {**payload["body"], "worker": worker, "token": f"{self.run_id}-{payload['step']}-{worker}"}
            try:
                answer = self._lambda(
                    "Invoke",
                    FunctionName=self.function,
                    InvocationType="RequestResponse",
                    Payload=json.dumps(body).encode(),
                )
            except CloudError as exc:
                return {"error": exc.problem}
            try:
                data = json.loads(answer["Payload"].read() or b"{}")
            except ValueError:
                data = None
            if not isinstance(data, dict):
                return {"error": f"worker {worker} answered no JSON object"}
            if answer.get("FunctionError"):
                message = str(data.get("errorMessage", data))
                return {
                    "error": message,
                    "billed_s": self.problem.platform.timeout_s if "timed out" in message else 0.0,
                }
            if (
                not isinstance(data.get("checkpoint"), dict)
                or "trained_s" not in data["checkpoint"]
                or any(k not in data for k in ("time_s", "loss", "finished_s"))
            ):
                return {
                    "error": f"worker {worker} answered no report with a checkpoint (docs/control.md)",
                    "billed_s": data.get("billed_s"),
                }
            return data

        with ThreadPoolExecutor(max_workers=n) as pool:  # all at once: synchronous training needs every worker
            answers = list(pool.map(one, range(n)))
        errors = sorted({a["error"] for a in answers if "error" in a})
        billed = sum(float(a.get("billed_s") or 0.0) for a in answers)
        if errors:
            return {"errors": errors, "billed_s": billed, "invocations": n}
        last = min(answers, key=lambda a: a["checkpoint"]["trained_s"])
        return {
            "report": {k: last[k] for k in ("run", "time_s", "loss", "step", "finished_s")},
            "checkpoint": last["checkpoint"],
            "billed_s": billed,
            "invocations": n,
        }

    def _lambda(self, operation: str, **params: Any) -> dict[str, Any]:
        from botocore import xform_name

        try:
            return getattr(self.aws_lambda, xform_name(operation))(**params)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise CloudError(
                f"aws lambda:{operation}", f"{error.get('Code')}: {error.get('Message')}", str(error.get("Code"))
            ) from None
        except BotoCoreError as exc:
            raise CloudError(f"aws lambda:{operation}", str(exc)) from None

    # ------------------------------------------------------------------ the run
    def cancel(self) -> ServerlessOutcome:
        """Tear the run down now (no controller of it is alive)."""
        predicted_time, predicted_launches, _ = prediction(self.problem, self.plan)
        return self._finish("cancelled", [], predicted_time, predicted_launches)

    def drive(self, max_segments: int | None = None, stop_after: int | None = None) -> ServerlessOutcome:
        """Run (or go on with) the run until the target, the horizon, a failure or a cancel.

        ``max_segments`` bounds the segment attempts (then the run gives up); ``stop_after``
        stops controlling after that many attempts, the run left ``running`` for a resume.
        """
        p, plan = self.problem.platform, self.plan
        predicted_time, predicted_launches, _ = prediction(self.problem, plan)
        done = {s["kind"]: s for s in self.record.steps(self.run_id) if s["status"] == "done"}
        errors: list[str] = []
        state = "running"
        tearing = [s for s in self.record.steps(self.run_id) if s["kind"] == "teardown"]
        if tearing:  # killed while tearing down: finish that
            return self._finish(tearing[-1]["payload"]["state"], errors, predicted_time, predicted_launches)
        try:
            if "ps" not in done:
                request = LaunchRequest(
                    run_id=self.run_id,
                    step=0,
                    role="ps",
                    type_name=p.ps_type,
                    zone=None,
                    market="on-demand",
                    count=plan.ps,
                    token=f"{self.run_id}-0",
                )
                got = self._step("ps", {"request": request.to_dict()}, self._launch_ps)
                self._event(0.0, "launch", role="ps", count=len(got["instances"]))
            if "configure" not in done:
                self._step(
                    "configure",
                    {"memory_mb": plan.memory_mb, "timeout_s": int(p.timeout_s), "functions": plan.functions},
                    self._configure,
                )
            limit = max_segments if max_segments is not None else 4 * predicted_launches + 8
            state = self._segments(limit, errors, stop_after)
        except CloudError as exc:
            errors.append(str(exc))
            state = "failed"
        if state == "running":
            return self._outcome(state, errors, predicted_time, predicted_launches)
        return self._finish(state, errors, predicted_time, predicted_launches)

    def _ps_address(self) -> str | None:
        ps = [i for i in self.ec2.known.values() if i.role == "ps" and i.ended_s is None]
        return ps[0].ps_address if ps else None

    def _segments(self, limit: int, errors: list[str], stop_after: int | None) -> str:
        plan = self.plan
        horizon = float(self.spec.get("horizon", 1.0)) * self.problem.time_s
        for attempt in range(limit + 1):
            if self.record.get(self.run_id)["state"] == "cancelling":
                return "cancelled"
            invokes = [s for s in self.record.steps(self.run_id) if s["kind"] == "invoke" and s["status"] == "done"]
            good = [s for s in invokes if "checkpoint" in s["result"]]
            if good and good[-1]["result"]["report"]["finished_s"] is not None:
                finish = float(good[-1]["result"]["report"]["finished_s"])
                return "met" if finish <= self.problem.time_s * (1 + 1e-12) else "missed"
            if attempt == limit:
                break
            if stop_after is not None and attempt >= stop_after:
                return "running"
            failed_in_row = len(invokes) - (invokes.index(good[-1]) + 1 if good else 0)
            if failed_in_row >= ATTEMPTS:
                errors.extend(invokes[-1]["result"].get("errors", []))
                return "failed"
            checkpoint = good[-1]["result"]["checkpoint"] if good else None
            if checkpoint is not None and checkpoint["time_s"] >= horizon:
                return "gave-up"
            segment = len(good)
            body = {
                "run": self.run_id,
                "functions": plan.functions,
                "batch": plan.local_batch,
                "ps": plan.ps,
                "ps_address": self._ps_address(),
                "memory_mb": plan.memory_mb,
                "segment": segment,
                "checkpoint": checkpoint,
            }
            result = self._step(
                "invoke", {"functions": plan.functions, "segment": segment, "body": body}, self._invoke_all
            )
            if "errors" in result:
                self._event(
                    checkpoint["time_s"] if checkpoint else 0.0, "error", segment=segment, errors=result["errors"]
                )
            else:
                report = result["report"]
                self._event(
                    report["time_s"],
                    "restart" if segment else "segment",
                    segment=segment,
                    loss=report["loss"],
                    step=report["step"],
                )
        errors.append(f"no end after {limit} segments")
        return "gave-up"

    def _finish(
        self, state: str, errors: list[str], predicted_time: float, predicted_launches: int
    ) -> ServerlessOutcome:
        if not any(s["kind"] == "teardown" and s["status"] == "done" for s in self.record.steps(self.run_id)):
            self._step("teardown", {"state": state}, self._teardown)
            outcome = self._outcome(state, errors, predicted_time, predicted_launches)
            self._event(outcome.time_s, "end", state=state, finish_s=outcome.finish_s, loss=outcome.loss)
        for step in self.record.steps(self.run_id):
            kept = step["kind"] == "teardown" and (step["result"] or {}).get("concurrency_kept")
            if kept:
                errors.append(
                    f"the reserved concurrency of {self.function} was not released ({kept}): release it with "
                    f"`aws lambda delete-function-concurrency --function-name {self.function}`"
                )
        outcome = self._outcome(state, errors, predicted_time, predicted_launches)
        self.record.set_state(self.run_id, state, outcome.to_dict())
        return outcome

    def _outcome(
        self, state: str, errors: list[str], predicted_time: float, predicted_launches: int
    ) -> ServerlessOutcome:
        """The run's outcome so far, from its record."""
        p, plan = self.problem.platform, self.plan
        invokes = [s for s in self.record.steps(self.run_id) if s["kind"] == "invoke" and s["status"] == "done"]
        good = [s["result"] for s in invokes if "checkpoint" in s["result"]]
        time_s = good[-1]["checkpoint"]["time_s"] if good else 0.0
        finish = good[-1]["report"]["finished_s"] if good else None
        billed = sum(float(s["result"].get("billed_s", 0.0)) for s in invokes)
        invocations = sum(int(s["result"].get("invocations", 0)) for s in invokes)
        cost = (
            plan.memory_mb / 1024.0 * billed * p.price_per_gb_s
            + invocations * p.price_per_request
            + plan.ps * p.ps_price_per_h * time_s / 3600.0
        )
        return ServerlessOutcome(
            state=state,
            finish_s=finish,
            time_s=time_s,
            segments=len(good),
            restarts=max(0, len(good) - 1),
            invocations=invocations,
            cost=cost,
            predicted_time_s=predicted_time,
            predicted_launches=predicted_launches,
            loss=good[-1]["report"]["loss"] if good else 1.0,
            errors=errors,
        )

    def _teardown(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Terminate the PS (a failure raises: instances would be left, a resume retries) and
        release the function's reserved concurrency; a release that fails (Lambda's endpoint
        gone, say) ends the run anyway and is kept in the result, for the outcome to say."""
        ids = [i.instance_id for i in self.ec2.instances(self.run_id) if i.ended_s is None]
        self.ec2.terminate(ids)
        try:
            self._lambda("DeleteFunctionConcurrency", FunctionName=self.function)
        except CloudError as exc:
            if exc.code != "ResourceNotFoundException":
                return {"terminated": ids, "concurrency_kept": str(exc)}
        return {"terminated": ids}


def start_spec(
    problem: ServerlessProblem,
    plan: ServerlessPlan,
    *,
    lambda_endpoint_url: str | None,
    endpoint_url: str | None,
    region: str,
    function: str,
    image_id: str | None,
    horizon: float,
) -> dict[str, Any]:
    """The recorded inputs of a new run (checked)."""
    check_plan(problem, plan)
    if not horizon > 0:
        raise InvalidInputError("--horizon", f"must be > 0, got {horizon!r}")
    if not isinstance(function, str):
        raise InvalidInputError("--function", f"a Lambda function name, got {function!r}")
    # the run configures (and releases) the function by this name: the name or ARN those calls take
    check_member("--function", function, "lambda", "UpdateFunctionConfiguration", "FunctionName")
    check_endpoint_url("--lambda-endpoint-url", lambda_endpoint_url)
    check_endpoint_url("--endpoint-url", endpoint_url)
    return {
        "kind": "serverless",
        "problem": problem.to_dict(),
        "plan": plan.to_dict(),
        "region": check_region(region),
        "endpoint_url": endpoint_url,
        "lambda_endpoint_url": lambda_endpoint_url,
        "twin": is_twin(lambda_endpoint_url),
        "function": function,
        "image_id": image_id or PLACEHOLDER_IMAGE,
        "horizon": horizon,
        "start_epoch": 0.0,
    }


def run_serverless(
    problem: ServerlessProblem,
    plan: ServerlessPlan,
    *,
    lambda_endpoint_url: str | None = None,
    endpoint_url: str | None = None,
    region: str = "us-east-1",
    state: str = ".dnnprov-runs",
    run_id: str | None = None,
    function: str = DEFAULT_FUNCTION,
    image_id: str | None = None,
    horizon: float = 1.0,
    max_segments: int | None = None,
    stop_after: int | None = None,
) -> tuple[str, ServerlessOutcome]:
    """Launch a λDNN plan and keep it training to its target (module docstring): (run id, outcome)."""
    spec = start_spec(
        problem,
        plan,
        lambda_endpoint_url=lambda_endpoint_url,
        endpoint_url=endpoint_url,
        region=region,
        function=function,
        image_id=image_id,
        horizon=horizon,
    )
    record = RunRecord(state)
    try:
        run_id = record.create(spec, run_id)
        record.lock(run_id)
        clock = RemoteTwinClock(lambda_endpoint_url) if spec["twin"] and lambda_endpoint_url else None
        spec["start_epoch"] = clock.now() if clock else time.time()
        record.set_spec(run_id, spec)
        return run_id, ServerlessRun(record, run_id).drive(max_segments, stop_after)
    finally:
        record.close()


def resume_serverless(state: str, run_id: str, max_segments: int | None = None) -> ServerlessOutcome:
    """Take a serverless run over after its controller stopped: pending steps re-sent with their tokens."""
    record = RunRecord(state, existing=True)
    try:
        record.lock(run_id)
        return ServerlessRun(record, run_id).drive(max_segments)
    finally:
        record.close()
