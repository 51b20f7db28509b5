"""The options of a search, declared once (``tinytune/options/``): the command line, the front
door and ``SearchConfig`` take the same options with the same defaults, and a refused value names
the option as each front end names it."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from tinytune.errors import CLI, PYTHON, BudgetError, ConfigError, OptionError, flag
from tinytune.options import (
    DEFAULT_DEVICE,
    DEFAULT_STORAGE,
    SEARCH_OPTIONS,
    Choice,
    Count,
    Duration,
    GpuShare,
    Option,
    Real,
    Seed,
    Size,
    StudyName,
    option,
)

PACKAGE = Path(__file__).resolve().parents[1] / "tinytune"
CALLBACKS = ("progress", "on_pretrain")
"""The keyword arguments of tinytune.optimize that are no options: its callbacks ..."""
NOT_OPTIONS = (*CALLBACKS, "example_input")
"""... and the example input of a network given as a module (Python alone has modules)."""
UNSET_BY_OPTIONS = {
    "checkpoint",  # the front door resolves the weights
    "supernet",  # resolved from the data set (tinytune.spaces.default_network)
    "n_classes",  # the data set's
    "baselines",
    "reference",
    "max_idle_proposals",
    "heartbeat_s",
    "grace_s",
    "contribution_plan",
}
"""The fields of SearchConfig that no option sets (asked for by tests and benchmarks only)."""


def _search_command() -> Any:
    from typer.main import get_command

    from tinytune.cli.main import app

    return get_command(app).commands["search"]  # type: ignore[attr-defined]


def _config_value(config: Any, path: str) -> Any:
    for attr in path.split("."):
        config = getattr(config, attr, "<missing>")
    return config


def _disagreements(
    options: tuple[Option, ...], command: Any, signature: inspect.Signature, config: Any
) -> list[str]:
    """Where the command line (a click command), the front door (a signature) and a default
    ``SearchConfig`` differ from ``options``: a missing or extra option, another flag or
    default."""
    found = []
    names = {o.name for o in options}
    flags = {p.name: p for p in command.params}
    keywords = {k: p for k, p in signature.parameters.items() if k not in NOT_OPTIONS}
    if extra := sorted(set(flags) - names):
        found.append(f"flags of no option: {extra}")
    if extra := sorted(set(keywords) - names):
        found.append(f"keywords of no option: {extra}")
    for o in options:
        if o.name not in flags:
            found.append(f"{o.name}: no flag")
        elif flags[o.name].opts != [o.flag] or flags[o.name].default != o.default:
            found.append(f"{o.name}: flag {flags[o.name].opts} = {flags[o.name].default!r}")
        if o.name not in keywords:
            found.append(f"{o.name}: no keyword")
        elif keywords[o.name].default != o.default:
            found.append(f"{o.name}: keyword = {keywords[o.name].default!r}")
        for path, value in o.config_values(o.parse(o.default)).items():
            if (held := _config_value(config, path)) != value:
                found.append(f"{o.name}: SearchConfig.{path} = {held!r}")
    return found


def test_every_option_is_a_flag_a_keyword_and_a_field_with_one_default() -> None:
    import tinytune
    from tinytune.search import SearchConfig

    config = SearchConfig(checkpoint="")
    signature = inspect.signature(tinytune.optimize)
    assert _disagreements(SEARCH_OPTIONS, _search_command(), signature, config) == []
    # every field of SearchConfig is an option's, but those that no option sets
    set_by_options = {
        path.split(".")[0] for o in SEARCH_OPTIONS for path in o.config_values(o.parse(o.default))
    }
    fields = {f.name for f in dataclasses.fields(SearchConfig)}
    assert fields - set_by_options == UNSET_BY_OPTIONS
    # the Python call's keyword arguments: the data set first, by position too
    assert next(iter(signature.parameters)) == "dataset"
    assert [k for k, p in signature.parameters.items() if p.kind is p.KEYWORD_ONLY][-3:] == list(
        NOT_OPTIONS
    )


def test_a_default_that_differs_in_one_front_end_is_found() -> None:
    """The check above fails where one front end has another default (or lacks an option):
    each front end in turn, given one deliberately different."""
    import tinytune
    from tinytune.search import SearchConfig

    command, config = _search_command(), SearchConfig(checkpoint="")
    signature = inspect.signature(tinytune.optimize)

    other_command = _search_command()
    trials = next(p for p in other_command.params if p.name == "trials")
    trials.default = 13
    assert _disagreements(SEARCH_OPTIONS, other_command, signature, config) == [
        "trials: flag ['--trials'] = 13"
    ]

    other_signature = signature.replace(
        parameters=[
            p.replace(default="1MB") if p.name == "sram_budget" else p
            for p in signature.parameters.values()
        ]
    )
    assert _disagreements(SEARCH_OPTIONS, command, other_signature, config) == [
        "sram_budget: keyword = '1MB'"
    ]

    other_config = dataclasses.replace(
        config, finetune=dataclasses.replace(config.finetune, epochs=9)
    )
    assert _disagreements(SEARCH_OPTIONS, command, signature, other_config) == [
        "epochs: SearchConfig.finetune.epochs = 9"
    ]

    # a spec whose option has another default than all three, or that one of them lacks
    changed = tuple(
        dataclasses.replace(o, default="rpi4") if o.name == "device" else o for o in SEARCH_OPTIONS
    )
    assert _disagreements(changed, command, signature, config) == [
        "device: flag ['--device'] = 'stm32f746'",
        "device: keyword = 'stm32f746'",
        "device: SearchConfig.device = 'stm32f746'",
    ]
    added = (*SEARCH_OPTIONS, Option("--data-split", Count(), 0, "A split."))
    assert _disagreements(added, command, signature, config) == [
        "data_split: no flag",
        "data_split: no keyword",
        "data_split: SearchConfig.data_split = '<missing>'",
    ]


def _bad_value(o: Option) -> tuple[Any, str]:
    """A value of option ``o`` that breaks its bounds: as a Python caller passes it, and as
    the flag's text."""
    kind = o.kind
    if isinstance(kind, Count):
        bad = kind.low - 1 if kind.low is not None else None
        assert bad is not None, o.name
        return bad, str(bad)
    if isinstance(kind, Real):
        bad = kind.low if kind.low_open else kind.low - 1  # type: ignore[operator]
        return bad, str(bad)
    if isinstance(kind, GpuShare):
        return 1.5, "1.5"
    if isinstance(kind, Size | Duration):
        return "0", "0"
    if isinstance(kind, Seed):
        return -1, "-1"
    if isinstance(kind, Choice):
        return "nothing-such", "nothing-such"
    if isinstance(kind, StudyName):
        return "", ""
    raise AssertionError(f"no bad value for {o.name}")


BOUNDED = [
    o.name for o in SEARCH_OPTIONS if isinstance(o.kind, Count | Real | GpuShare | Size | Duration)
]
CHECKED = BOUNDED + [
    o.name for o in SEARCH_OPTIONS if isinstance(o.kind, Seed | Choice | StudyName)
]


def test_every_bounded_option_is_checked() -> None:
    """Every option with bounds is in the parametrisation below (the list is made from the
    spec: this guards the kinds it is made of)."""
    assert set(BOUNDED) >= {
        "trials",
        "time_budget",
        "epoch_budget",
        "sram_budget",
        "flash_budget",
        "latency_budget",
        "workers",
        "max_retries",
        "gpus_per_trial",
        "epochs",
        "lr",
        "batch_size",
        "pretrain_steps",
        "repeats",
        "proxy_eta",
        "screen_epochs",
        "screen_fraction",
        "proposals",
    }


@pytest.mark.parametrize("name", CHECKED)
def test_a_refused_value_names_the_flag_and_the_keyword(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tinytune
    from tinytune.cli.main import main

    o = option(name)
    python, text = _bad_value(o)
    db = tmp_path / "t.db"
    with pytest.raises(OptionError) as raised:
        tinytune.optimize(**{"storage": f"sqlite:///{db}", name: python})
    assert raised.value.field == name
    said = str(raised.value)
    assert said.startswith(f"{name} ") and "--" not in said, said
    if o.kind.budget:
        assert isinstance(raised.value, BudgetError)
    assert main(["search", "--storage", f"sqlite:///{db}", o.flag, text]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tinytune: error: {o.flag} ") and err.count("\n") == 1, err
    # the same refusal in each front end's words
    assert err.removeprefix(f"tinytune: error: {o.flag} ").rstrip("\n") == said.removeprefix(
        f"{name} "
    )
    assert not db.exists()


def test_an_option_named_in_advice_is_worded_by_each_front_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A message naming other options (a hint with a value, a switch turned on) says them as
    flags on the command line and as keyword arguments in Python."""
    import tinytune
    from tinytune.cli.main import main

    storage = f"sqlite:///{tmp_path / 't.db'}"
    with pytest.raises(OptionError, match=r"^inline=True runs in this process, so workers=3 "):
        tinytune.optimize(storage=storage, inline=True, workers=3)
    assert main(["search", "--storage", storage, "--inline", "--workers", "3"]) == 2
    assert (
        "error: --inline runs in this process, so --workers 3 would be" in capsys.readouterr().err
    )
    with pytest.raises(OptionError, match=r"^proxy=True and halving=True are two low rungs"):
        tinytune.optimize(storage=storage, proxy=True, halving=True)
    assert main(["search", "--storage", storage, "--proxy", "--halving"]) == 2
    assert "error: --proxy and --halving are two low rungs" in capsys.readouterr().err
    with pytest.raises(OptionError, match=r"; lower screen_epochs or screen_fraction$"):
        tinytune.optimize(storage=storage, halving=True, epochs=2, screen_epochs=4)
    argv = ["search", "--storage", storage, "--halving", "--epochs", "2", "--screen-epochs", "4"]
    assert main(argv) == 2
    assert "; lower --screen-epochs or --screen-fraction\n" in capsys.readouterr().err


def test_a_call_with_no_such_option_is_a_type_error() -> None:
    import tinytune

    with pytest.raises(TypeError, match="sram_budgett"):
        tinytune.optimize(sram_budgett="1KB")
    with pytest.raises(TypeError, match="takes from 0 to 1 positional arguments but 2"):
        tinytune.optimize("digits", 3)


def test_flags_and_words_in_each_style() -> None:
    assert flag("sram_budget").worded(CLI) == "--sram-budget"
    assert flag("sram_budget").worded(PYTHON) == "sram_budget"
    assert flag("inline", True).worded(CLI) == "--inline"
    assert flag("inline", True).worded(PYTHON) == "inline=True"
    assert flag("measure_int8", False).worded(CLI) == "--no-measure-int8"
    assert flag("measure_int8", False).worded(PYTHON) == "measure_int8=False"
    assert flag("device", "rpi4").worded(CLI) == "--device rpi4"
    assert flag("device", "rpi4").worded(PYTHON) == "device='rpi4'"
    assert flag("weights", "/a b/w.pt").worded(CLI) == "--weights '/a b/w.pt'"
    assert flag("lr", 0.05).worded(PYTHON) == "lr=0.05"
    words = "raise " + flag("sram_budget") + " or pass " + flag("device", "rpi4") + "."
    assert words.worded(CLI) == "raise --sram-budget or pass --device rpi4."
    assert str(words) == "raise sram_budget or pass device='rpi4'."


def test_an_option_error_keeps_its_field_class_and_words_through_pickle() -> None:
    from tinytune.errors import BudgetOptionError

    for error in (
        OptionError("trials", "must be >= 1, got 0"),
        BudgetOptionError("sram_budget", "must be > 0, got -1"),
        OptionError.saying("workers", flag("inline", True) + " and " + flag("workers", 2)),
    ):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and again.field == error.field
        assert again.worded(CLI) == error.worded(CLI) and str(again) == str(error)
    budget = BudgetOptionError("sram_budget", "must be > 0, got -1")
    assert isinstance(budget, BudgetError) and isinstance(budget, ConfigError)
    assert budget.worded(CLI) == "--sram-budget must be > 0, got -1"


def test_from_options_sets_every_field_an_option_names() -> None:
    from tinytune.options import resolve
    from tinytune.search import SearchConfig
    from tinytune.search.study.study_space import StudySpace

    values = resolve({"lr": 0.05, "seed": 7, "sram_budget": "none", "time_budget": "5m"})
    config = SearchConfig.from_options(values, checkpoint="")
    assert (config.finetune.lr, config.tune_lr) == (0.05, False)
    assert (config.seed, config.finetune.seed) == (7, 7)
    assert config.sram_budget_bytes is None and config.time_budget_s == 300.0
    split = SearchConfig.from_options(resolve({"data_seed": 3}), checkpoint="")
    assert split.data_seed == 3 and StudySpace.from_config(split).data_seed == 3  # its space
    default = SearchConfig.from_options(resolve({}), checkpoint="")
    assert default == SearchConfig(checkpoint="")
    assert default.tune_lr and default.sram_budget_bytes == 256 * 1024


def test_each_default_is_stated_once() -> None:
    """The default storage, device and network are each one constant that every front end
    imports: no module of the package writes them out again (the STM32F746's own profile
    names it, as every device's does), and what the front ends show is that constant."""
    import tinytune
    import tinytune.api
    import tinytune.cli.common
    import tinytune.stored
    from tinytune.search import SearchConfig
    from tinytune.search.study.study_space import StudySpace
    from tinytune.spaces import DEFAULT_SUPERNET, default_network

    stated: dict[str, list[str]] = {DEFAULT_STORAGE: [], DEFAULT_DEVICE: [], DEFAULT_SUPERNET: []}
    for path in sorted(PACKAGE.rglob("*.py")):
        for text in _non_doc_strings(path):
            if text in stated:
                stated[text].append(str(path.relative_to(PACKAGE)))
    assert stated == {
        DEFAULT_STORAGE: ["options/table.py"],
        DEFAULT_DEVICE: ["options/table.py"],  # and the built-in table, data/devices.json
        DEFAULT_SUPERNET: ["spaces/supernets.py"],
    }
    assert tinytune.api.DEFAULT_STORAGE is DEFAULT_STORAGE
    assert tinytune.cli.common.DEFAULT_STORAGE is DEFAULT_STORAGE
    for load in (tinytune.load, tinytune.stored.load):
        assert inspect.signature(load).parameters["storage"].default is DEFAULT_STORAGE
    assert inspect.signature(tinytune.export_bundle).parameters["storage"].default is (
        DEFAULT_STORAGE
    )
    assert (
        SearchConfig(checkpoint="").device == StudySpace.from_attrs({}).device == (DEFAULT_DEVICE)
    )
    assert SearchConfig(checkpoint="").supernet == default_network("digits") == DEFAULT_SUPERNET
    from typer.main import get_command

    from tinytune.cli.main import app

    commands = get_command(app).commands  # type: ignore[attr-defined]
    for name, command in commands.items():
        for param in command.params:
            if param.name == "storage":
                assert param.default == DEFAULT_STORAGE, name
            if param.name == "supernet" and name != "search":  # search's: by the data set
                assert param.default == DEFAULT_SUPERNET, name
    device = next(p for p in commands["export"].params if p.name == "device")
    assert f"else {DEFAULT_DEVICE})" in (device.help or "")


def test_a_file_is_digested_by_one_function() -> None:
    """Every SHA-256 of a file's bytes goes through tinytune.hashing.sha256_file: no other
    module makes a digest to feed blocks to (``hashlib.sha256()`` without the bytes)."""
    fed = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "sha256"
                and not node.args
            ):
                fed.append(str(path.relative_to(PACKAGE)))
    assert fed == ["hashing.py"]


def test_the_command_line_hands_every_option_to_the_front_door(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tinytune
    from tinytune.cli.main import main
    from tinytune.search import Counts, SearchResult

    asked: dict[str, Any] = {}

    def optimize(*args: object, **kwargs: Any) -> SearchResult:
        asked.update(kwargs)
        return SearchResult("s", Counts(measured=1), (), None, 1, (), 1.0, 1)

    monkeypatch.setattr(tinytune, "optimize", optimize)
    assert main(["search", "--trials", "3", "--sram-budget", "none", "--seed", "5"]) == 0
    assert set(asked) == {o.name for o in SEARCH_OPTIONS} | set(CALLBACKS)
    assert (asked["trials"], asked["sram_budget"], asked["seed"]) == (3, "none", 5)
    assert {k: v for k, v in asked.items() if k not in ("trials", "sram_budget", "seed")} == {
        **{
            o.name: o.default
            for o in SEARCH_OPTIONS
            if o.name not in ("trials", "sram_budget", "seed")
        },
        "progress": asked["progress"],
        "on_pretrain": asked["on_pretrain"],
    }
    capsys.readouterr()


def test_every_option_of_the_search_is_described_in_the_commands_page() -> None:
    """docs/commands.md lists the search's options by hand, grouped for a reader: an option
    added to the spec without a word there fails here."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "commands.md").read_text()
    missing = [o.flag for o in SEARCH_OPTIONS if not o.positional and f"`{o.flag}" not in page]
    assert missing == []


_TEXT_FLAG = re.compile(r"(?<![\w-])--(?:no-)?([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
_QUOTED = re.compile(
    r"(?<!\w)'[^']*'(?!\w)"
)  # a command quoted whole: 'tinytune pretrain --force'
FLAGS_IN_TEXT = {
    # what tells where a bundle's weights came from (its manifest's checkpoint_source)
    ("exporting.py", "--weights"),
    ("bundle/assemble.py", "--weights"),
    # the default of units.check_seed, for the profile command
    ("units.py", "--seed"),
    # the calibration's fit, which only the calibrate command runs
    ("hwmodels/fitting.py", "--device"),
}
"""The options of the front door that modules below the command line write as flags in text,
and why that is no message a Python caller gets."""


def _non_doc_strings(path: Path) -> list[str]:
    """The string constants of a module (parts of f-strings included), but its docstrings and
    those of its constants (a string that is a statement of its own)."""
    tree = ast.parse(path.read_text())
    documenting = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in documenting
    ]


def test_no_module_below_the_command_line_names_an_option_as_a_flag_in_text() -> None:
    """An option of the front door (``tinytune.optimize``, ``export_bundle``, ``load``,
    ``devices``) named in a message is a ``Flag`` that each front end words: nothing rewrites
    text for a Python caller, so a message of text that says ``--epochs`` would say it to one.
    A command written out in quotes (``'tinytune pretrain --force'``) is what to run, and
    stays; so does a flag alone in the options' table, which declares the option."""
    import tinytune

    keywords = {
        name
        for function in (
            tinytune.optimize,
            tinytune.export_bundle,
            tinytune.load,
            tinytune.devices,
        )
        for name in inspect.signature(function).parameters
    }
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        if where.startswith("cli/"):
            continue
        for text in _non_doc_strings(path):
            if where == "options/table.py" and _TEXT_FLAG.fullmatch(text):  # a declaration
                continue
            for match in _TEXT_FLAG.finditer(_QUOTED.sub("", text)):
                if match.group(1).replace("-", "_") in keywords:
                    found.add((where, match.group(0)))
    assert found == FLAGS_IN_TEXT
