"""``audio:PATH``: a keyword folder in the Speech Commands layout reads as the front-end's
log-mel features, its speakers held apart between the splits; another sample rate is resampled;
what is not a mono 16-bit PCM clip, clips of two rates, a folder of one keyword, an empty
keyword and too few speakers are refused in one line; and a search runs on it end to end."""

from __future__ import annotations

import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from bench.keywords import make, speak, voice, write
from tinytune.data import get_dataset
from tinytune.data.audio import read_wav
from tinytune.data.logmel import logmel
from tinytune.data.series import source_of
from tinytune.errors import DataError


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keywords")
    make(out, speakers=10, takes=1, keywords=3, seed=1)
    (out / "_background_noise_").mkdir()
    write(out / "_background_noise_" / "hum.wav", np.zeros(32_000, np.int16))
    (out / "yes" / "notes.txt").write_text("not a clip")
    return out


def test_a_keyword_folder_reads_as_log_mel_features_with_speakers_apart(folder: Path) -> None:
    data = get_dataset(f"audio:{folder}")
    assert data.class_names == ("no", "up", "yes")  # the noise folder is no keyword
    assert data.input_shape == (1, 49, 40) and data.resolution == 49
    splits = data.load(49)
    assert [len(s.y) for s in (splits.train, splits.val, splits.test)] == [18, 6, 6]
    speakers = np.array(data.sources)
    train, val, test = (set(speakers[p]) for p in data._parts)
    assert not (train & val or train & test or val & test)  # each voice in one split
    # a sample is the front-end's features of its file, standardised on the training split
    mean, std = data.normalisation
    first = data._parts[2][0]
    file = sorted((folder / data.class_names[int(data._y[first])]).glob("*.wav"))
    clip = next(f for f in file if source_of(f.name) == speakers[first])
    samples, rate = read_wav(str(clip))
    assert rate == 16_000
    restored = splits.test.x[0].astype(np.float64) * std[0] + mean[0]
    assert np.allclose(restored * 256.0, logmel(samples), atol=1e-3)


def test_a_splits_clips_give_its_samples_exactly(folder: Path) -> None:
    """What a bundle embeds and feeds its front-end: each split's clips in the order of its
    samples, whose features, through ``to_input``, are the split's float32 values bit for bit."""
    data = get_dataset(f"audio:{folder}")
    splits = data.load(49)
    for name, split in (("train", splits.train), ("test", splits.test)):
        clips = data.recorded(name, 4)
        assert clips.dtype == np.int16 and clips.shape == (4, 16_000)
        features = np.stack([logmel(c) for c in clips])
        made = data.to_input(features)
        assert made.dtype == np.float32
        assert made.tobytes() == split.x[:4, 0].tobytes()
    assert data.recorded("val", 100).shape == (len(splits.val.y), 16_000)  # all there are


def test_the_repeated_partitions_keep_the_speakers_apart(folder: Path) -> None:
    """Each repeat of a small validation split draws other speakers for it, never one of the
    training speakers' clips, keeps its size and every keyword; the test split stays."""
    from tinytune.data import repeated
    from tinytune.data.stratify import resplit

    data = get_dataset(f"audio:{folder}")
    splits = data.load(49)
    assert splits.train.groups is not None and splits.val.groups is not None
    seen = set()
    for r in range(1, 6):
        part = repeated(splits, r, seed=0)
        assert part.test is splits.test
        assert part.train.groups is not None and part.val.groups is not None
        assert not set(part.train.groups.tolist()) & set(part.val.groups.tolist())
        assert len(part.val) >= len(splits.val) and set(part.val.y.tolist()) == {0, 1, 2}
        seen.add(tuple(sorted(set(part.val.groups.tolist()))))
    assert len(seen) > 1  # other speakers from one repeat to the next
    # when no draw holds every class on both sides, the repeat keeps the original partition
    # (one validation sample cannot hold both classes)
    labels, groups = np.array([0, 1, 1]), np.array([0, 1, 2])
    train, val = resplit(labels[:2], labels[2:], 1, 0, groups)
    assert train.tolist() == [0, 1] and val.tolist() == [2]


def test_another_rate_is_resampled_and_other_names_are_split_clip_by_clip(
    tmp_path: Path,
) -> None:
    from scipy.signal import resample_poly

    rng = np.random.default_rng(2)
    for word in ("no", "yes"):
        (tmp_path / word).mkdir()
        for take in range(5):
            clip = speak(word, voice(rng), rng)
            low = np.round(resample_poly(clip.astype(np.float64), 1, 2)).astype(np.int16)
            with wave.open(str(tmp_path / word / f"take{take}.wav"), "wb") as f:
                f.setnchannels(1)
                f.setsampwidth(2)
                f.setframerate(8_000)
                f.writeframes(low.astype("<i2").tobytes())
    data = get_dataset(f"audio:{tmp_path}")
    assert data.sources is None  # no speaker in the names: stratified clip by clip
    assert data.load(49).train.x.shape == (6, 1, 49, 40)
    samples, _ = read_wav(str(tmp_path / "no" / "take0.wav"))
    up = np.clip(np.round(resample_poly(samples.astype(np.float64), 2, 1)), -32768, 32767)
    index = int(np.flatnonzero(data._y == 0)[0])
    assert np.allclose(data._x[index, 0] * 256.0, logmel(up.astype(np.int16)))


# the sub-format GUID of WAVE_FORMAT_EXTENSIBLE after its format tag (KSDATAFORMAT_SUBTYPE_*)
_GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")


def _riff(
    fmt_tag: int,
    channels: int,
    bits: int,
    data: bytes,
    rate: int = 16_000,
    extensible: bool = False,
) -> bytes:
    """A WAV file's bytes: a plain header, or WAVE_FORMAT_EXTENSIBLE with ``fmt_tag`` as its
    sub-format."""
    block = channels * bits // 8
    tag = 0xFFFE if extensible else fmt_tag
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    if extensible:
        fmt += struct.pack("<HHIH", 22, bits, 4, fmt_tag) + _GUID_TAIL
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _folder(tmp_path: Path, odd: bytes | None = None, rate: int = 16_000) -> Path:
    rng = np.random.default_rng(3)
    for word in ("no", "yes"):
        (tmp_path / word).mkdir(parents=True)
        for take in range(3):
            write(tmp_path / word / f"take{take}.wav", speak(word, voice(rng), rng))
    if odd is not None:
        (tmp_path / "yes" / "odd.wav").write_bytes(odd)
    return tmp_path


@pytest.mark.parametrize(
    ("odd", "words"),
    [
        (_riff(3, 1, 32, b"\0" * 64), "holds 1 channel.s. of 32-bit float samples"),
        (_riff(1, 2, 16, b"\0" * 64), "holds 2 channel.s. of 16-bit integer samples"),
        (_riff(1, 1, 8, b"\0" * 64), "holds 1 channel.s. of 8-bit integer samples"),
        (_riff(1, 1, 24, b"\0" * 63), "holds 1 channel.s. of 32-bit integer samples"),
        (_riff(6, 1, 8, b"\0" * 64), "is not a PCM WAV .Unknown wave file format: ALAW"),
        (_riff(6, 1, 8, b"\0" * 64, extensible=True), "is not a PCM WAV"),
        (b"hello, not a wave", "is not a PCM WAV"),
        (b"hello", "is not a PCM WAV"),
        (_riff(1, 1, 16, b"\0" * 64)[:50], "is a broken WAV .Reached EOF prematurely"),
        (_riff(1, 1, 16, b"\0" * 64, rate=8_000), "sampled at 8000 Hz.*one sample rate"),
    ],
)
def test_what_is_no_mono_16_bit_pcm_clip_of_the_folders_rate_is_refused(
    tmp_path: Path, odd: bytes, words: str
) -> None:
    with pytest.raises(DataError, match=words) as raised:
        get_dataset(f"audio:{_folder(tmp_path, odd)}")
    message = str(raised.value)
    assert "\n" not in message and "odd.wav" in message


def test_an_extensible_header_of_16_bit_pcm_reads_as_a_plain_one(tmp_path: Path) -> None:
    """WAVE_FORMAT_EXTENSIBLE with the PCM sub-format, as some recorders write even mono 16-bit
    clips, holds the same samples as the plain header."""
    samples = np.arange(-500, 500, dtype=np.int16) * 31
    (tmp_path / "plain.wav").write_bytes(_riff(1, 1, 16, samples.astype("<i2").tobytes()))
    ext = _riff(1, 1, 16, samples.astype("<i2").tobytes(), extensible=True)
    (tmp_path / "ext.wav").write_bytes(ext)
    for name in ("plain.wav", "ext.wav"):
        read, rate = read_wav(str(tmp_path / name))
        assert rate == 16_000 and read.dtype == np.int16 and np.array_equal(read, samples)


def test_a_clip_that_cannot_be_read_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "yes" / "odd.wav").mkdir()  # a folder named like a clip
    with pytest.raises(DataError) as raised:
        get_dataset(f"audio:{folder}")
    message = str(raised.value)
    assert "\n" not in message and "odd.wav' cannot be read" in message


def test_a_folder_it_cannot_learn_from_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "maybe").mkdir()
    with pytest.raises(DataError, match=r"keyword folder 'maybe' holds no \.wav clip"):
        get_dataset(f"audio:{folder}")
    (folder / "maybe").rmdir()
    for take in range(3):
        (folder / "no" / f"take{take}.wav").unlink()
    (folder / "no").rmdir()
    with pytest.raises(DataError, match="has 1 keyword folder; a classifier needs two"):
        get_dataset(f"audio:{folder}")


def test_too_few_speakers_to_hold_every_keyword_in_every_split_are_refused(
    tmp_path: Path,
) -> None:
    make(tmp_path, speakers=2, takes=3, keywords=2)
    with pytest.raises(DataError, match="2 speakers are too few to hold every keyword"):
        get_dataset(f"audio:{tmp_path}")


@pytest.mark.slow
def test_a_search_runs_on_keywords_end_to_end(folder: Path, tmp_path: Path) -> None:
    """The built-in DS-CNN of the features' shape, exported from its module, searched with the
    default budget's machinery (inline, two measured fine-tunes)."""
    import torch

    import tinytune
    from tinytune.builtin_networks import build_network

    torch.manual_seed(0)
    net = build_network("ds-cnn", (1, 49, 40), 3)
    result = tinytune.optimize(
        f"audio:{folder}",
        supernet=net,
        example_input=torch.zeros(1, 1, 49, 40),
        trials=2,
        inline=True,
        storage=f"sqlite:///{tmp_path / 'db.sqlite'}",
    )
    assert result.front
    assert all(p.memory_bytes is not None and p.memory_bytes > 0 for p in result.front)
    assert tinytune.load(storage=f"sqlite:///{tmp_path / 'db.sqlite'}").front


@pytest.mark.parametrize(
    "damage",
    [
        lambda f: (f / "yes" / "odd.wav").write_bytes(b"hello, not a wave"),
        lambda f: (f / "yes" / "odd.wav").write_bytes(_riff(1, 1, 16, b"\0" * 64, rate=8_000)),
        lambda f: [p.unlink() for p in (f / "no").glob("*.wav")] and (f / "no").rmdir(),
    ],
)
def test_a_search_of_a_bad_folder_stops_in_one_line_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage
) -> None:
    """What the data set refuses stops ``tinytune search`` before any work: exit status 2,
    one line naming the file, and a database that already held a study is left as it was."""
    import optuna
    import torch

    from tinytune.builtin_networks import build_network
    from tinytune.cli.main import main

    folder = _folder(tmp_path / "words")
    damage(folder)
    torch.manual_seed(0)
    net = build_network("ds-cnn", (1, 49, 40), 2).eval()
    torch.export.save(torch.export.export(net, (torch.zeros(1, 1, 49, 40),)), tmp_path / "k.pt2")
    storage = f"sqlite:///{tmp_path / 'keep.db'}"
    optuna.create_study(study_name="old", storage=storage).optimize(lambda t: 1.0, n_trials=1)
    before = (tmp_path / "keep.db").read_bytes()
    capsys.readouterr()  # optuna's own log of the study above
    argv = ["search", "--supernet", str(tmp_path / "k.pt2"), "--dataset", f"audio:{folder}"]
    assert main([*argv, "--storage", storage, "--inline", "--trials", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(folder) in err
    assert (tmp_path / "keep.db").read_bytes() == before


def test_a_folders_features_are_computed_once_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The second reading of a folder takes its features from the cache (no clip is
    transformed), bit for bit; another clip's content, a damaged cache file or a cache that
    cannot be written only cost the computation again."""
    import tinytune.data.audio as audio

    cache = tmp_path / "cache"  # this test's own
    monkeypatch.setenv("TINYTUNE_CACHE", str(cache))
    folder = _folder(tmp_path / "words")
    first = get_dataset(f"audio:{folder}")
    kept = list((cache / "features").glob("*.npy"))
    assert len(kept) == 1

    def refused(*_: object) -> None:
        raise AssertionError("a clip was transformed again")

    with monkeypatch.context() as m:
        m.setattr(audio, "logmel", refused)
        again = get_dataset(f"audio:{folder}")
    assert np.array_equal(again._x, first._x) and again.files == first.files

    kept[0].write_bytes(kept[0].read_bytes()[:100])  # damaged: computed and written again
    assert np.array_equal(get_dataset(f"audio:{folder}")._x, first._x)
    assert np.load(kept[0]).shape == (6, 49, 40)

    rng = np.random.default_rng(9)
    write(folder / "yes" / "take0.wav", speak("no", voice(rng), rng))
    changed = get_dataset(f"audio:{folder}")
    assert len(list((cache / "features").glob("*.npy"))) == 2
    assert not np.array_equal(changed._x, first._x)

    monkeypatch.setenv("TINYTUNE_CACHE", str(folder / "yes" / "take1.wav"))  # a file
    with caplog.at_level("WARNING", logger="tinytune.data.audio"):
        assert np.array_equal(get_dataset(f"audio:{folder}")._x, changed._x)
    assert "the next run computes them again" in caplog.text


@pytest.mark.slow
def test_ray_workers_fine_tune_on_keyword_clips(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two local Ray workers each read the folder (its features from the cache the driver
    wrote) and fine-tune the built-in DS-CNN on them; every evaluation is stored."""
    import optuna
    import torch

    from tinytune.builtin_networks import build_network
    from tinytune.cli.main import main

    torch.manual_seed(0)
    net = build_network("ds-cnn", (1, 49, 40), 3).eval()
    torch.export.save(torch.export.export(net, (torch.zeros(1, 1, 49, 40),)), tmp_path / "k.pt2")
    storage = f"sqlite:///{tmp_path / 'ray.db'}"
    argv = ["search", "--supernet", str(tmp_path / "k.pt2"), "--dataset", f"audio:{folder}"]
    argv += ["--trials", "3", "--epochs", "1", "--workers", "2", "--storage", storage]
    assert main([*argv, "--study", "kws"]) == 0, capsys.readouterr().err
    trials = optuna.load_study(study_name="kws", storage=storage).trials
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) >= 3 and all(0.0 <= t.values[0] <= 1.0 for t in done)
