"""The front door (``tinytune.api``) beyond the README's example."""

from __future__ import annotations

import dataclasses
import inspect
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tinytune.evaluators import EvaluationResult, FinetuneTask

if TYPE_CHECKING:
    from tinytune.search import SearchConfig


def _made_up(task: FinetuneTask) -> EvaluationResult:
    """Made-up accuracies, higher with more biases trained: a search without fine-tuning."""
    from tinytune.spaces import Candidate

    acc = 0.3 + 0.01 * Candidate.from_json(task.candidate).update.bias_last_k
    return EvaluationResult("ok", accuracy=acc, val_accuracy=acc)


def _made_up_study(
    tmp_path: Path, name: str = "s", weights: Path | None = None
) -> tuple[str, SearchConfig]:
    """A study of 2 trials with :func:`_made_up` accuracies in ``tmp_path/db.sqlite`` (weights
    of made-up bytes unless given), its URL and its configuration."""
    from tinytune.db import open_store
    from tinytune.evaluators import FinetuneConfig
    from tinytune.search import InlineExecutor, SearchConfig, run_search

    if weights is None:
        weights = tmp_path / "weights.pt"
        weights.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = SearchConfig(
        tune_lr=False,
        checkpoint=str(weights),
        study_name=name,
        trials=2,
        finetune=FinetuneConfig(),
    )
    with open_store(url) as store:
        run_search(config, store, InlineExecutor(_made_up))
    return url, config


def test_devices_reads_no_database_that_does_not_exist(tmp_path: Path) -> None:
    import tinytune
    from tinytune.hwmodels import device_names

    missing = tmp_path / "none.db"
    profiles = tinytune.devices(f"sqlite:///{missing}")
    assert [p.name for p in profiles] == device_names()
    assert not missing.exists()
    with pytest.raises(tinytune.TinyTuneError, match="cannot parse database URL"):
        tinytune.devices("postgresql+psycopg://u:pw@:::bad")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"preset": "everything"}, "^preset must be one of full, last, .*, got 'everything'$"),
        ({"precision": "int4"}, "^precision must be one of fp32, int8, got 'int4'$"),
        ({"sampler": "grid"}, "^sampler must be one of tpe, .*, got 'grid'$"),
        ({"engine": "tflite"}, "^engine must be one of bundle, published, pytorch, got 'tflite'"),
        ({"device": "esp32"}, "^device must be one of esp32c3, host, .*, got 'esp32'$"),
        ({"workers": 0}, "workers must be >= 1"),
        ({"sram_budget": "12parsecs"}, "is not a size"),
        ({"dataset": "cifar"}, "unknown data set"),
        ({"trials": "3"}, "trials must be an integer, got '3'"),
        ({"trials": 2.5}, "trials must be an integer, got 2.5"),
        ({"epochs": 2.5}, "epochs must be an integer, got 2.5"),
        ({"epochs": 1001}, "epochs must lie in \\[1, 1000\\], got 1001"),
        ({"batch_size": None}, "batch_size must be an integer, got None"),
        ({"lr": "0.1"}, "lr must be a number, got '0.1'"),
        ({"lr": True}, "lr must be a number, got True"),
        ({"workers": "2"}, "workers must be an integer"),
        ({"max_retries": None}, "max_retries must be an integer"),
        ({"repeats": 1.5}, "repeats must be an integer"),
        ({"proposals": 2.0}, "proposals must be an integer"),
        ({"pretrain_steps": 1.5}, "pretrain_steps must be an integer"),
        ({"screen_fraction": "0.5"}, "screen_fraction must be a number"),
        ({"sram_budget": [1]}, "sram_budget must be a number, got \\[1\\]"),
        ({"latency_budget": float("nan")}, "latency_budget must be a number, got nan"),
        ({"epoch_budget": float("nan")}, "epoch_budget must be a number, got nan"),
        ({"seed": "1"}, "seed must be an integer from 0 to 4294967295, got '1'"),
        ({"study": None}, "study must be a name of 1 to 512 characters"),
        ({"weights": 5}, "weights must be a path, got 5"),
        ({"weights": " "}, "weights must be a path, got ' '"),
        (
            {"supernet": 5},
            "^supernet must be a str \\(a name or a file\\) or a torch.nn.Module, got 5$",
        ),
        ({"supernet": "resnet9000"}, "unknown supernet 'resnet9000'"),
        # the checks are the command line's; their messages name the Python keywords
        ({"sram_budget": 10}, "raise sram_budget to at least 27724B$"),
        ({"workers": 4}, "^inline=True runs in this process, so workers=4 would be ignored"),
        (
            {"ray_address": "127.0.0.1:1"},
            "^inline=True runs without Ray, so ray_address='127.0.0.1:1' would be ignored",
        ),
        ({"pretrain_steps": 0}, "^pretrain_steps must be >= 1, got 0$"),
        ({"latency_budget": "500"}, "latency_budget '500' has no unit; write 500ms or 500s$"),
        ({"progress": 5}, "progress must be a function or None, got 5"),
        ({"on_pretrain": "print"}, "on_pretrain must be a function or None, got 'print'"),
        ({"study": " tinytune"}, "study ' tinytune' begins or ends with a space"),
        ({"study": "a\nb"}, "study 'a\\\\nb' holds a control or format character; give a"),
        ({"study": "evil\u202etxt"}, "holds a control or format character"),
        ({"study": "a\u2028b"}, "holds a control or format character"),
        ({"trials": np.int64(3)}, "trials must be a Python int, got int64 3; pass int"),
    ],
)
def test_bad_arguments_raise_before_any_work(tmp_path: Path, kwargs: dict, message: str) -> None:
    import tinytune

    db = tmp_path / "t.db"
    with pytest.raises(tinytune.TinyTuneError, match=message) as raised:
        tinytune.optimize(storage=f"sqlite:///{db}", inline=True, **kwargs)
    assert "--" not in str(raised.value)  # a Python caller's keywords, not the flags
    assert not db.exists()  # nothing was opened, let alone stored


@pytest.mark.parametrize(
    ("target", "kwargs", "message"),
    [
        (
            None,
            {},
            "the target must be a front point, a trial number or a candidate key, got None",
        ),
        (3.5, {}, "the target must be a front point, a trial number or a candidate key"),
        (True, {}, "the target must be a front point"),
        (0, {"out": None}, "out must be a path, got None"),
        (0, {"out": 5}, "out must be a path, got 5"),
        (0, {"weights": 5}, "weights must be a path, got 5"),
        (0, {"lr": "x"}, "lr must lie in \\[1e-06, 10\\), got 'x'"),
        (0, {"lr": True}, "lr must lie in \\[1e-06, 10\\), got True"),
        (0, {"lr": 1e-9}, "lr must lie in \\[1e-06, 10\\), got 1e-09"),
        (
            0,
            {"lr_schedule": "cosine"},
            "lr_schedule must be one of halving, constant, got 'cosine'",
        ),
        (0, {"lr_schedule": 2}, "lr_schedule must be one of halving, constant, got 2"),
        (0, {"seed": 1.5}, "seed must be an integer from 0 to 4294967295, got 1.5"),
        (0, {"samples": 0}, "^samples must be an integer >= 1, got 0"),
        (0, {"on_measure": 3}, "on_measure must be a function or None, got 3"),
        (
            0,
            {"on_measure_progress": "bar"},
            "on_measure_progress must be a function or None, got 'bar'",
        ),
    ],
)
def test_bad_export_arguments_raise_before_any_work(
    tmp_path: Path, target: object, kwargs: dict, message: str
) -> None:
    import tinytune

    db, out = tmp_path / "t.db", tmp_path / "bundle"
    with pytest.raises(tinytune.TinyTuneError, match=message) as raised:
        tinytune.export_bundle(
            target,  # type: ignore[arg-type]
            **{"out": out, "storage": f"sqlite:///{db}", **kwargs},
        )
    assert "--" not in str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_export_refuses_to_lose_an_edited_bundle_file_before_any_work(tmp_path: Path) -> None:
    import tinytune
    from tinytune.bundle import BUNDLE_FORMAT, write_bundle
    from tinytune.bundle.manifest import checksums

    out = write_bundle(
        tmp_path / "bundle",
        {"main.c": b"int main;"},
        {"format": BUNDLE_FORMAT, "files": checksums({"main.c": b"int main;"})},
    )
    (out / "main.c").write_text("int main; /* mine */")
    storage = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(
        tinytune.TinyTuneError,
        match=r"main.c \(changed\); move it elsewhere, or replace it with force=True$",
    ):
        tinytune.export_bundle(0, out, storage=storage)
    with pytest.raises(tinytune.TinyTuneError, match=r"^force must be True or False, got 'yes'"):
        tinytune.export_bundle(0, out, storage=storage, force="yes")  # type: ignore[arg-type]
    assert (out / "main.c").read_text() == "int main; /* mine */"
    (out / "main.c").write_text("int main;")
    (out / "Makefile").write_text("all:")  # the user's, where the new bundle writes one
    with pytest.raises(tinytune.TinyTuneError, match=r"would lose: Makefile \(yours\);"):
        tinytune.export_bundle(0, out, storage=storage)
    assert (out / "Makefile").read_text() == "all:"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_a_candidate_is_looked_up_by_a_trial_number_or_a_key_only() -> None:
    from tinytune.errors import StorageError
    from tinytune.stored import find_candidate

    for bad in (None, 3.5, False):
        with pytest.raises(StorageError, match="by a trial number or a stored key, got"):
            find_candidate(None, study=None, target=bad)  # type: ignore[arg-type]


def test_a_study_of_another_space_is_refused_before_any_pre_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Continuing a study with another supernet is refused before its weights are pre-trained
    (minutes); so is ``resume`` of a study that does not exist."""
    import tinytune
    import tinytune.checkpoints

    url, _ = _made_up_study(tmp_path)

    def no_pre_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("pre-trained before the study's space was checked")

    monkeypatch.setattr(tinytune.checkpoints, "ensure_checkpoint", no_pre_training)
    with pytest.raises(AssertionError, match="pre-trained before"):  # the same space goes on
        tinytune.optimize("digits", study="s", lr=0.2, trials=3, storage=url)
    with pytest.raises(tinytune.TinyTuneError, match="study 's' exists with another search spa"):
        tinytune.optimize("digits", study="s", supernet="ofa-mbv3-w0.35", storage=url)
    with pytest.raises(tinytune.TinyTuneError, match=r"name or pass device='stm32f746'$"):
        tinytune.optimize("digits", study="s", device="rpi4", lr=0.2, storage=url)
    with pytest.raises(tinytune.TinyTuneError, match=r"or pass the study's own lr=0.2$"):
        tinytune.optimize("digits", study="s", lr=0.1, storage=url)
    with pytest.raises(tinytune.TinyTuneError, match="no study 'other' to resume"):
        tinytune.optimize("digits", study="other", resume=True, storage=url)
    new = tmp_path / "new.sqlite"
    with pytest.raises(tinytune.TinyTuneError, match="no study 'tinytune' to resume: the data"):
        tinytune.optimize("digits", resume=True, storage=f"sqlite:///{new}")
    assert not new.exists()


def test_a_front_point_exports_from_its_own_study_when_two_measured_it(tmp_path: Path) -> None:
    """The presets are measured by every study of a database: a front point still names one
    bundle, its own study's (the candidate's key alone matches two studies)."""
    import json

    import tinytune
    from tinytune.checkpoints import shipped_checkpoint
    from tinytune.spaces import get_supernet

    weights = shipped_checkpoint(get_supernet("ofa-proxyless-w0.35"))
    for name in ("a", "b"):
        url, _ = _made_up_study(tmp_path, name, weights)
    point = min(tinytune.load("b", url).front, key=lambda p: p.memory_bytes)
    assert point.study == "b"
    with pytest.raises(tinytune.TinyTuneError, match="was measured in 2 studies"):
        tinytune.export_bundle(
            point.candidate_key, tmp_path / "by-key", storage=url, measure_int8=False
        )
    done = tinytune.export_bundle(point, tmp_path / "bundle", storage=url, measure_int8=False)
    manifest = json.loads((done.path / "manifest.json").read_text())
    assert (manifest["study"], manifest["trial"]) == ("b", point.trial)
    assert manifest["candidate_key"] == point.candidate_key


def test_a_bundle_predicted_with_a_forced_calibration_says_so(tmp_path: Path) -> None:
    """The manifest names the calibration that predicted the step, and its FORCED mark."""
    import json

    import tinytune
    from tinytune.checkpoints import shipped_checkpoint
    from tinytune.db import open_store
    from tinytune.hwmodels import get_device
    from tinytune.spaces import get_supernet

    weights = shipped_checkpoint(get_supernet("ofa-proxyless-w0.35"))
    url, _ = _made_up_study(tmp_path, "s", weights)
    with open_store(url) as store:
        cid = store.add_calibration(
            "stm32f746", get_device("stm32f746").to_dict(), {}, forced=True
        )
    point = min(tinytune.load("s", url).front, key=lambda p: p.memory_bytes)
    done = tinytune.export_bundle(point, tmp_path / "bundle", storage=url, measure_int8=False)
    manifest = json.loads((done.path / "manifest.json").read_text())
    assert manifest["device"]["latency_profile"] == (
        f"calibration #{cid} in the database, FORCED: held-out error above the accuracy required"
    )


def test_an_error_keeps_its_class_and_cause_and_the_functions_pickle() -> None:
    import pickle

    import tinytune
    from tinytune.search.execution.executor import RayUnavailableError

    with pytest.raises(RayUnavailableError, match="or leave out ray_address for") as raised:
        tinytune.optimize(storage="sqlite:///:memory:", ray_address="127.0.0.1:1")
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)
    for function in (tinytune.load, tinytune.optimize, tinytune.export_bundle):
        assert pickle.loads(pickle.dumps(function)) is function


def test_the_command_line_keeps_its_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same refusal, from ``tinytune.load`` and from ``tinytune pareto``."""
    import optuna

    import tinytune
    from tinytune.cli.main import main
    from tinytune.db import open_store

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url):
        pass
    for name in ("a", "b"):
        optuna.create_study(study_name=name, storage=url)
    with pytest.raises(tinytune.TinyTuneError, match=r"choose one with study: a, b$"):
        tinytune.load(storage=url)
    assert main(["pareto", "--storage", url]) == 2
    assert "choose one with --study: a, b" in capsys.readouterr().err


def test_a_run_that_measures_nothing_stores_no_copy_of_the_front(tmp_path: Path) -> None:
    """...and one under other budgets stores its own front, with the budgets."""
    import tinytune
    from tinytune.db import open_store
    from tinytune.search import InlineExecutor, run_search

    url, config = _made_up_study(tmp_path)
    with open_store(url) as store:
        before = store.pareto_snapshots("s")
        again = run_search(config, store, InlineExecutor(_made_up))  # its budget is spent
        assert again.counts.measured == 0
        assert store.pareto_snapshots("s") == before
        assert before[-1].budgets == {
            "sram_bytes": 256 * 1024,
            "flash_bytes": 1024 * 1024,  # the STM32F746's flash
            "latency_s": None,
        }
        smaller = dataclasses.replace(config, sram_budget_bytes=40 * 1024)
        run_search(smaller, store, InlineExecutor(_made_up))  # another budget: another front
        snapshots = store.pareto_snapshots("s")
        assert len(snapshots) == len(before) + 1
        assert snapshots[-1].budgets["sram_bytes"] == 40 * 1024
        assert all(p["memory_bytes"] <= 40 * 1024 for p in snapshots[-1].points)
        # a budget that no measured candidate meets: an empty front, stored as such
        tiny = dataclasses.replace(config, sram_budget_bytes=27_800)
        run_search(tiny, store, InlineExecutor(_made_up))
    view = tinytune.load("s", url)
    assert view.front == () and view.budgets["sram_bytes"] == 27_800


def test_a_study_stored_under_a_spaced_name_goes_on_but_no_new_one_is_made(tmp_path: Path) -> None:
    """Earlier versions stored ``--study " x"`` as given: such a study is continued, while a new
    study with a space at either end is refused, in an existing database too."""
    import optuna
    import sqlalchemy as sa

    import tinytune
    from tinytune.db import open_store
    from tinytune.search import InlineExecutor, run_search

    url, config = _made_up_study(tmp_path, "old")
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # as an earlier version would have stored it
        for table in sa.inspect(engine).get_table_names():
            if "study_name" in {c["name"] for c in sa.inspect(engine).get_columns(table)}:
                connection.execute(sa.text(f"UPDATE {table} SET study_name = ' old'"))
    engine.dispose()
    before = len(optuna.load_study(study_name=" old", storage=url).trials)
    spaced = dataclasses.replace(config, study_name=" old", trials=8)
    with open_store(url) as store:
        run_search(spaced, store, InlineExecutor(_made_up))
    assert len(optuna.load_study(study_name=" old", storage=url).trials) > before
    assert optuna.get_all_study_names(url) == [" old"]
    assert tinytune.load(" old", storage=url).front
    with pytest.raises(tinytune.TinyTuneError, match="study ' new' begins or ends with a space"):
        tinytune.optimize("digits", study=" new", storage=url)
    with open_store(url) as store, pytest.raises(tinytune.TinyTuneError, match="' new' begins"):
        run_search(dataclasses.replace(config, study_name=" new"), store, InlineExecutor(_made_up))


def test_a_stored_study_reads_back_its_space_typed(tmp_path: Path) -> None:
    """What tinytune.load, a front point's export and report read of a study is the space its
    search stored: the config's, with the engine that predicted its latencies."""
    import tinytune
    from tinytune.db import open_store
    from tinytune.search.study.study_space import StudySpace
    from tinytune.stored import find_candidate

    url, config = _made_up_study(tmp_path)
    expected = StudySpace.from_config(dataclasses.replace(config, engine="bundle"))
    view = tinytune.load("s", url)
    assert view.space == expected
    assert view.space.finetune is not None and view.space.finetune.lr == config.finetune.lr
    with open_store(url) as store:
        found = find_candidate(store, study="s", target=view.front[0].trial)
        assert found.space == expected
        unknown = find_candidate(store, study=None, target=view.front[0].candidate_key[:12])
    assert unknown.study == "s" and unknown.space == expected


# --- the signature a type checker sees ---------------------------------------------------------


def test_each_declared_type_is_what_its_kind_takes() -> None:
    """The type a type checker holds a keyword argument to (its annotation in SearchOptions) is
    the one the option's kind takes at run time, None included where the kind takes None."""
    import typing

    from tinytune.options import SEARCH_OPTIONS, SearchOptions

    declared = {n: typing.get_args(a)[0] for n, a in SearchOptions.__annotations__.items()}
    assert list(declared) == [o.name for o in SEARCH_OPTIONS[1:]]
    for o in SEARCH_OPTIONS[1:]:
        annotation = declared[o.name]
        written = getattr(annotation, "__forward_arg__", None) or inspect.formatannotation(
            annotation
        )
        kind = o.kind.api_type
        expected = kind if isinstance(kind, str) else inspect.formatannotation(kind)
        assert written.replace("pathlib.", "") == expected.replace("pathlib.", ""), o.name


def test_optimize_shows_every_option_and_refuses_another_keyword() -> None:
    import tinytune.api

    signature = inspect.signature(tinytune.api.optimize)
    names = list(signature.parameters)
    assert names[:3] == ["dataset", "study", "storage"]
    assert names[-3:] == ["progress", "on_pretrain", "example_input"]
    assert signature.parameters["weight_decay"].annotation is float
    assert signature.parameters["example_input"].annotation == "torch.Tensor | None"
    assert signature.return_annotation == "SearchResult"
    with pytest.raises(
        TypeError, match=r"^optimize\(\) got an unexpected keyword argument 'trails'$"
    ):
        tinytune.api.optimize("digits", trails=3)  # type: ignore[call-arg]


@pytest.mark.slow
def test_a_type_checker_refuses_an_option_of_the_wrong_type(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed")
    import subprocess
    import sys

    (tmp_path / "wrong.py").write_text('import tinytune\n\ntinytune.optimize(trials="x")\n')
    (tmp_path / "right.py").write_text(
        'import tinytune\n\nresult = tinytune.optimize("digits", trials=3, sram_budget=None)\n'
        "print(result.front)\n"
    )
    # in a folder of the user's, with nothing but the install to find tinytune by
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--cache-dir",
         str(tmp_path / "cache"), "wrong.py", "right.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert len(lines) == 1, run.stdout + run.stderr
    assert lines[0].startswith('wrong.py:3: error: Argument "trials" to "optimize"'), lines
    assert 'incompatible type "str"; expected "int | None"' in lines[0]
