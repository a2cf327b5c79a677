"""Bad profiler input (issue 19): one ``dnnprov: error:`` line naming the field, exit 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import one_error

from dnnprov.cli import main

HEADER = "run,workers,batch_wa,cc,step,loss"
SPOT_TIMING = "run,type,gpus,workers,ps,batch_per_gpu,iteration_s,comm_s"
SERVERLESS_TIMING = "run,memory_mb,functions,samples_per_s,storage_mb_s,failed"


def loss_rows(*, loss: str = "", workers: str = "4", step: str = "") -> str:
    """Two runs of ten steps of a falling loss; the fifth row's fields replaced where given."""
    lines = [HEADER]
    for run, b in (("a", 256.0), ("b", 512.0)):
        for k in range(10):
            lines.append(f"{run},4,{b},0.5,{k * 100.0},{3.0 - 0.2 * k}")
    cells = lines[5].split(",")
    cells[1], cells[4], cells[5] = workers or cells[1], step or cells[4], loss or cells[5]
    lines[5] = ",".join(cells)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        (dict(loss="1e308"), (":6.loss", "out of range")),
        (dict(workers="99999999999999999999"), (":6.workers", "out of range")),
        (dict(step="1e30"), (":6.step", "out of range")),
        (dict(step="-100"), (":6.step", ">= 0")),
    ],
)
def test_loss_csv_numbers_out_of_range(tmp_path, capsys, change, needles):
    path = tmp_path / "loss.csv"
    path.write_text(loss_rows(**change))
    one_error(capsys, ["profile", "fit-loss", str(path)], *needles)


def test_csv_field_over_the_csv_module_limit(tmp_path, capsys):
    path = tmp_path / "long.csv"
    path.write_text(loss_rows() + 'c,4,256.0,0.5,0.0,"' + "9" * 140_000 + '"\n')
    one_error(capsys, ["profile", "fit-loss", str(path)], "long.csv:22", "field larger than field limit")


@pytest.mark.parametrize(
    ("entry", "needles"),
    [
        ({"loss": 1e308, "step": 25}, ("log_history[1].loss", "out of range")),
        ({"loss": 0.5, "step": -25}, ("log_history[1].step", ">= 0")),
        ({"loss": 0.5, "step": 1e30}, ("log_history[1].step", "out of range")),
    ],
)
def test_trainer_state_refuses_what_the_csv_reader_refuses(tmp_path, capsys, entry, needles):
    history = [{"loss": 2.0 - 0.1 * k, "step": 25 * k} for k in range(12)]
    history[1] = entry
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": history}))
    one_error(capsys, ["profile", "fit-loss", str(path), "--batch-size", "128"], *needles)


def test_spot_timing_gpus_of_1e308(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text(f"{SPOT_TIMING}\nr0,p3.2xlarge,1,1,1,128,0.49,0.16\nr1,g4dn.4xlarge,1e308,1,1,128,1.26,0.16\n")
    one_error(capsys, ["profile", "fit-timing", str(path), "--param-size-mb", "100"], ":3.gpus", "out of range")


@pytest.mark.parametrize("rate", ["1e308", "1e15"])
def test_serverless_timing_rate_too_large_gives_no_fit_with_inf(tmp_path, capsys, rate):
    """1e308 is refused by the reader; 1e15 is read, but its fit is not finite and is refused, not printed."""
    rows = [f"m{m},{m},8,{rate if m == 2432 else 20 + m / 1000},{1 + m / 1000},0" for m in (2432, 2560, 2816, 3008)]
    path = tmp_path / "s.csv"
    path.write_text("\n".join([SERVERLESS_TIMING, "m1536,1536,4,,,1", *rows]) + "\n")
    if rate == "1e308":
        one_error(capsys, ["profile", "fit-timing", str(path)], ":3.samples_per_s", "out of range")
        return
    code = main(["profile", "fit-timing", str(path)])
    captured = capsys.readouterr()
    assert "inf" not in captured.out and "nan" not in captured.out
    assert code == 0 or (code == 2 and captured.err.startswith("dnnprov: error:"))


def write_log(path: Path, loss_of_step, runs: int = 3, steps: int = 20) -> Path:
    """Runs of ``steps`` logged steps with losses ``loss_of_step(run, k)``."""
    lines = [HEADER]
    for r in range(runs):
        for k in range(steps):
            lines.append(f"r{r},{2 + r},{256.0 * (r + 1)},0.5,{k * 100.0},{loss_of_step(r, k)}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("name", "loss"),
    [
        ("constant", lambda r, k: 2.0),
        ("noisy-constant", lambda r, k: 2.0 + 0.01 * ((k * 7919 + r * 31) % 13 - 6)),
        ("increasing", lambda r, k: 1.0 + 0.05 * k),
    ],
)
def test_loss_that_does_not_fall_is_refused(tmp_path, capsys, name, loss):
    one_error(
        capsys,
        ["profile", "fit-loss", str(write_log(tmp_path / f"{name}.csv", loss))],
        "loss log",
        "falls with the steps in no run",
    )


def test_every_step_equal_is_refused(tmp_path, capsys):
    path = tmp_path / "zero.csv"
    path.write_text(
        HEADER + "\n" + "\n".join(f"r{r},2,256.0,0.5,0.0,{3.0 - 0.1 * k}" for r in range(3) for k in range(8)) + "\n"
    )
    one_error(capsys, ["profile", "fit-loss", str(path)], "two different steps")


@pytest.mark.parametrize(("runs", "shift", "needle"), [(1, 0.0, "one run"), (3, -3.0, "below 0")])
def test_doubtful_loss_data_fits_with_a_warning(tmp_path, capsys, runs, shift, needle):
    path = write_log(
        tmp_path / "log.csv", lambda r, k: shift + 1.0 + 900.0 * (1 + 0.2 * r) / (k * 100.0 + 300.0), runs=runs
    )
    assert main(["profile", "fit-loss", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("dnnprov: warning:") and needle in err


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        (["a,1024,1,20.0,5.5,0", "b,2048,1,10.0,7.3,0", "c,3008,1,1.0,9.0,0"], "training rate falls"),
        (["a,1024,1,14.3,5.5,0", "b,2048,1,,,1", "c,3008,1,20.3,9.0,0"], "failed above a memory that ran"),
    ],
)
def test_doubtful_serverless_timing_fits_with_a_warning(tmp_path, capsys, rows, needle):
    path = tmp_path / "s.csv"
    path.write_text("\n".join([SERVERLESS_TIMING, *rows]) + "\n")
    assert main(["profile", "fit-timing", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("dnnprov: warning:") and needle in err


@pytest.mark.parametrize(
    "option",
    [
        ["--base", "spot/resnet110-paper"],
        ["--extrapolation", "2"],
        ["--extrapolation", "nan"],
        ["--name", "mine"],
        ["--param-size-mb", "12"],
        ["--keep-base-timings"],
        ["--measured-on", "p3.2xlarge"],
    ],
)
def test_fit_loss_options_of_the_written_profile_need_out(tmp_path, capsys, option):
    """Without --out these shaped nothing and were dropped unseen (--extrapolation nan too)."""
    path = tmp_path / "loss.csv"
    path.write_text(loss_rows())
    one_error(capsys, ["profile", "fit-loss", str(path), *option], option[0], "goes with --out")


@pytest.mark.parametrize("option", [["--batch-size", "32"], ["--workers", "2"], ["--worker-batch", "64"]])
def test_fit_loss_options_of_another_log_kind_are_refused(tmp_path, capsys, option):
    """--batch-size and --workers shape a trainer_state.json, --worker-batch a TF folder: on a
    CSV log they were ignored without a word."""
    path = tmp_path / "loss.csv"
    path.write_text(loss_rows())
    for command in ("fit-loss", "to-csv"):
        extra = ["--out", str(tmp_path / "out.csv")] if command == "to-csv" else []
        one_error(capsys, ["profile", command, str(path), *option, *extra], option[0], "it would be ignored")


def test_fit_loss_checks_extrapolation_and_base_before_fitting(tmp_path, capsys):
    """--extrapolation 0.5 was refused as workload.domain.extrapolation, and an unknown --base
    as --profile, each after the fit and its warnings (more than one stderr line)."""
    path = tmp_path / "loss.csv"
    path.write_text(loss_rows())
    base = ["--base", "spot/resnet110-paper", "--out", str(tmp_path / "p.json")]
    one_error(capsys, ["profile", "fit-loss", str(path), *base, "--extrapolation", "0.5"], "--extrapolation", ">= 1")
    nosuch = ["--base", "spot/nosuch", "--out", str(tmp_path / "p.json")]
    one_error(capsys, ["profile", "fit-loss", str(path), *nosuch], "--base", "no embedded workload")
    assert not (tmp_path / "p.json").exists()


def test_fit_timing_base_needs_out(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text(SERVERLESS_TIMING + "\n")
    one_error(capsys, ["profile", "fit-timing", str(path), "--base", "serverless/resnet50"], "--base", "--out")
