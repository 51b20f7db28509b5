"""``tinytune pareto --plot``: a PNG of the measured front and the hypervolume history, and
one-line errors for targets it cannot write."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinytune.cli.main import main
from tinytune.db import open_store
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask
from tinytune.search import InlineExecutor, SearchConfig, run_search
from tinytune.search.front.pareto import HYPERVOLUME_BOX
from tinytune.search.front.recording import hypervolume_history
from tinytune.spaces import Candidate

PNG = b"\x89PNG\r\n\x1a\n"


def made_up(task: FinetuneTask) -> EvaluationResult:
    """An evaluation without training: accuracy grows with the biases updated."""
    acc = 0.3 + 0.01 * Candidate.from_json(task.candidate).update.bias_last_k
    return EvaluationResult("ok", accuracy=acc, val_accuracy=acc)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database with a study of three measured baselines (made-up accuracies)."""
    folder = tmp_path_factory.mktemp("pareto")
    ckpt = folder / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{folder / 'db.sqlite'}"
    config = SearchConfig(
        reference=False,
        tune_lr=False,
        checkpoint=str(ckpt),
        study_name="s",
        trials=3,
        finetune=FinetuneConfig(epochs=1),
    )
    with open_store(url) as store:
        run_search(config, store, InlineExecutor(made_up))
    return url


def _point(key: str, val: float, memory: int, latency: float) -> dict:
    """A stored front point of a made-up candidate."""
    return {
        "trial": 0,
        "candidate_key": key,
        "val_accuracy": val,
        "test_accuracy": val,
        "memory_bytes": memory,
        "flash_bytes": None,
        "latency_s": latency,
        "scheme": "x",
    }


def test_plot_writes_a_png(
    searched: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "front.png"
    assert main(["pareto", "--storage", searched, "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed
    assert (
        "the front meets the budgets of the run that stored it: SRAM 256 KB, flash 1 MB, step "
        "latency none"
    ) in " ".join(printed.split())
    assert " ".join(HYPERVOLUME_BOX.split()) in " ".join(printed.split())  # what it measures
    into_new = out.parent / "figures" / "front.png"  # its folder made, as report's is
    assert main(["pareto", "--storage", searched, "--plot", str(into_new)]) == 0
    assert into_new.read_bytes()[:8] == PNG
    with open_store(searched) as store:
        measured = store.evaluations("s", fidelity="measured", status="ok")
        history = hypervolume_history(store.pareto_snapshots("s"), measured)
        stored = store.latest_pareto("s").hypervolume
    assert [n for n, _ in history] == [1, 2, 3]  # one snapshot per measured evaluation
    assert all(0.0 < hv <= 1.0 for _, hv in history)
    # one hypervolume: the history ends on the figure the table and the search print
    assert history[-1][1] == stored
    assert f"hypervolume {stored:.4f}" in " ".join(printed.split())


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("a-file/front.png", "a-file' (not a folder)"),
        ("a-file/deeper/front.png", "a-file' (not a folder)"),
        ("front.svg", "must name a .png file"),
        ("folder.png", "is a folder"),
    ],
)
def test_bad_plot_target_is_one_line_and_exit_2(
    searched: str,
    tmp_path: Path,
    target: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "folder.png").mkdir()
    (tmp_path / "a-file").write_text("")
    code = main(["pareto", "--storage", searched, "--plot", str(tmp_path / target)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tinytune: error: ") and message in err


def test_a_refused_plot_makes_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "figures" / "deep" / "front.png"
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["pareto", "--storage", url, "--plot", str(target)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == []


def test_plot_of_a_study_without_a_front_still_draws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tinytune.db import EvaluationRecord

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        store.add_candidate("a" * 16, "ofa-proxyless-w0.35", "{}")
        store.add_evaluation(EvaluationRecord("s", "a" * 16, "measured", "failed", error="boom"))
    out = tmp_path / "empty.png"
    assert main(["pareto", "--storage", url, "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    assert "no measured candidate" in capsys.readouterr().out


def test_the_only_study_is_found_before_its_first_measurement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A study whose first fine-tunes have not finished has no tinytune evaluation yet, only
    its Optuna study: it is still the database's only study."""
    import optuna
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url):
        pass
    assert main(["pareto", "--storage", url]) == 2
    assert "holds no study; make one with 'tinytune search' first" in capsys.readouterr().err
    engine = sa.create_engine(url)
    assert not sa.inspect(engine).has_table("studies")  # reading created no Optuna tables
    engine.dispose()
    optuna.create_study(study_name="early", storage=url, directions=["maximize"])
    assert main(["pareto", "--storage", url]) == 0
    assert "study 'early' has no measured candidate" in capsys.readouterr().out
    optuna.create_study(study_name="later", storage=url, directions=["maximize"])
    assert main(["pareto", "--storage", url]) == 2
    assert "holds 2 studies; choose one with --study: early, later" in capsys.readouterr().err


def test_the_history_rises_only_when_the_front_improves() -> None:
    """Measuring a dominated, slower candidate moves the stored hypervolume's reference point
    (10 % beyond the slowest step measured); the history, against one reference point, stays
    level until the front improves."""
    import datetime as dt

    from tinytune.db import ParetoSnapshot
    from tinytune.search.front.pareto import hypervolume

    a, b = _point("a", 0.9, 40_000, 0.1), _point("b", 0.95, 80_000, 0.2)
    better = _point("c", 0.97, 60_000, 0.15)
    now = dt.datetime.now(dt.UTC)
    snaps = [
        ParetoSnapshot(1, "s", now, 2, 0.5, [a, b]),
        ParetoSnapshot(2, "s", now, 3, 0.6, [a, b]),  # a slower, dominated point measured
        ParetoSnapshot(3, "s", now, 4, 0.7, [a, better]),
    ]
    history = hypervolume_history(snaps, [])
    assert [n for n, _ in history] == [2, 3, 4]
    assert history[0][1] == history[1][1] < history[2][1]
    ref = (0.0, 1.1 * 80_000, 1.1 * 0.2)  # the largest SRAM and latency of any front
    expected = hypervolume(
        [
            (-p["val_accuracy"], p["memory_bytes"] / ref[1], p["latency_s"] / ref[2])
            for p in (a, b)
        ],
        (0.0, 1.0, 1.0),
    )
    assert history[0][1] == pytest.approx(expected)


def test_the_history_holds_the_fronts_of_the_latest_budgets_and_empty_ones_as_zero() -> None:
    """A run under a smaller SRAM budget chose its front from fewer candidates: its snapshots
    are left out of the history of a later run under the first budgets, and a front that no
    candidate made counts as 0."""
    import datetime as dt

    from tinytune.db import ParetoSnapshot

    a, b = _point("a", 0.9, 40_000, 0.1), _point("b", 0.95, 80_000, 0.2)
    wide = {"sram_bytes": 262_144, "flash_bytes": None, "latency_s": None}
    narrow = {"sram_bytes": 50_000, "flash_bytes": None, "latency_s": None}
    now = dt.datetime.now(dt.UTC)
    snaps = [
        ParetoSnapshot(1, "s", now, 2, 0.5, [a, b], wide),
        ParetoSnapshot(2, "s", now, 3, 0.3, [a], narrow),  # b over the smaller budget
        ParetoSnapshot(3, "s", now, 4, 0.5, [a, b], wide),
    ]
    history = hypervolume_history(snaps, [])
    assert [n for n, _ in history] == [2, 4]
    assert history[0][1] == history[1][1] > 0.0
    tiny = {"sram_bytes": 10_000, "flash_bytes": None, "latency_s": None}
    assert hypervolume_history([*snaps, ParetoSnapshot(4, "s", now, 5, None, [], tiny)], []) == [
        (5, 0.0)
    ]
    history = hypervolume_history([ParetoSnapshot(0, "s", now, 1, None, [], wide), *snaps], [])
    assert [n for n, _ in history] == [1, 2, 4] and history[0][1] == 0.0
    assert history[1:] == hypervolume_history(snaps, [])


def test_the_fronts_points_carry_their_trials_and_schemes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each point of the front is labelled with its trial number (what ``tinytune export``
    takes), however many there are, and the legend names each scheme with a marker of its
    own."""
    import matplotlib.pyplot as plt

    from tinytune.viz.pareto import pareto_figure

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    front = [
        {**_point("a", 0.9, 40_000, 0.1), "scheme": "bias-only", "trial": 7},
        {**_point("b", 0.95, 60_000, 0.2), "scheme": "mcunetv3", "trial": 3},
        {**_point("c", 0.96, 70_000, 0.3), "scheme": "bias-only", "trial": 12},
        # a schedule twin of trial 3's fine-tune: labelled with it, in order of SRAM
        {**_point("d", 0.95, 80_000, 0.1), "scheme": "mcunetv3", "trial": 5, "fine_tune": "b"},
    ]
    front[1]["fine_tune"] = "b"
    pareto_figure([], front, [], tmp_path / "small.png", title="t")
    ax = figures[0].axes[0]
    assert [t.get_text() for t in ax.texts] == ["7", "3 5", "12"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "front: bias-only (2)" in legend and "front: mcunetv3 (2)" in legend
    markers = {c.get_label(): c.get_paths()[0].vertices.shape for c in ax.collections[1:]}
    assert markers["front: bias-only (2)"] != markers["front: mcunetv3 (2)"]
    many = [{**_point(str(k), 0.5 + k / 100, 1000 * (k + 1), 0.1), "trial": k} for k in range(30)]
    pareto_figure([], many, [], tmp_path / "large.png", title="t")
    assert len(figures[1].axes[0].texts) == 30
    assert (tmp_path / "small.png").read_bytes()[:8] == PNG
