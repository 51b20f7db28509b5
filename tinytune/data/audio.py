"""``audio:PATH``: keyword clips, as the Speech Commands data set lays them out, searched on the
log-mel features a device computes of them (:mod:`tinytune.data.logmel`).

The folder holds one sub-folder per keyword (its name, the class's) of ``.wav`` files, each a
mono 16-bit PCM clip. Every clip of the folder has one sample rate; a rate other than the
front-end's (16 kHz) is resampled to it (a polyphase filter, :func:`scipy.signal.resample_poly`,
then rounded to 16 bits), and each clip is padded with silence or cut to one second. Hidden
entries, files of other suffixes and the ``_background_noise_`` folder (recordings of noise,
not a keyword) are left alone, unless ``audio:PATH?noise=V`` asks for the noise to be mixed into
a copy of every training clip at a volume up to ``V`` (augmentation, off by default). A file
that is not a WAV, a WAV of another encoding (compressed, float, 8 or 24 bits, stereo), clips of
different rates and a keyword folder without a clip are refused in one line naming the file and
the rule.

**Speakers are held apart.** Where the files are named as Speech Commands names them,
``SPEAKER_nohash_N.wav``, all the clips of one speaker fall in one of the training, validation
and test splits, so that the test accuracy is that of voices the fine-tune never heard; speakers
are dealt to the splits at random (seeded) until each holds its share (60/20/20) of the clips.
Other names are split clip by clip, stratified, as series are. The repeated partitions of a small
validation split (:func:`~tinytune.data.repeated`) keep the speakers apart too.

A sample is the clip's features, ``(1, frames, bands)`` (49 x 40 by default), as the front-end's
Q8 ``log2`` over 256, standardised with the mean and standard deviation of the training split
(:attr:`~tinytune.data.series.SeriesDataset.normalisation`): a device computes the same
integers of what its microphone gives, and the bundle's input scale folds in the rest.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tinytune.data.logmel import LogMelSpec, logmel
from tinytune.data.series import SeriesDataset, class_files, file_sources
from tinytune.data.splits import Splits
from tinytune.errors import ConfigError, DataError

if TYPE_CHECKING:
    from tinytune.data.decoded import ProgressCallback

__all__ = ["AUDIO_PREFIX", "AudioDataset", "frontend_of", "read_wav"]

AUDIO_PREFIX = "audio:"

NOISE_FOLDER = "_background_noise_"
"""The Speech Commands folder of noise recordings, which is no keyword."""

NOISE_OPTION = "?noise="
"""What follows a keyword folder's path to mix its background noise into the training clips:
``audio:PATH?noise=0.1``, the loudest volume (a share of the recordings' own level)."""


def _noise_option(path: str) -> tuple[str, float]:
    """The folder and the noise volume of ``PATH`` or ``PATH?noise=V`` (0: none).

    Raises:
        DataError: a volume that is not a number in (0, 1].
    """
    folder, marker, value = path.rpartition(NOISE_OPTION)
    if not marker:
        return path, 0.0
    try:
        volume = float(value)
    except ValueError:
        volume = math.nan
    if not 0.0 < volume <= 1.0:
        raise DataError(
            f"background noise {value!r} of {AUDIO_PREFIX + path!r} is not a volume; expected "
            f"{AUDIO_PREFIX}PATH{NOISE_OPTION}V with V in (0, 1], e.g. 0.1"
        )
    return folder, volume


def read_wav(path: str) -> tuple[np.ndarray, int]:
    """The ``int16`` samples and the sample rate of a mono 16-bit PCM WAV file: a plain
    ``WAVE_FORMAT_PCM`` header, ``WAVE_FORMAT_EXTENSIBLE`` with the PCM sub-format (as some
    recorders write it), RF64, or big-endian RIFX, read by :func:`scipy.io.wavfile.read`.

    Raises:
        DataError: the file cannot be read, is no WAV, ends before its data does, or holds
            another encoding.
    """
    import warnings

    from scipy.io import wavfile

    rule = "a clip is a mono 16-bit PCM WAV file"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", wavfile.WavFileWarning)
            rate, data = wavfile.read(path)
    except wavfile.WavFileWarning as e:  # its data ends early, or a chunk is malformed
        raise DataError(f"audio file {path!r} is a broken WAV ({e}); {rule}") from None
    except (ValueError, EOFError, struct.error) as e:  # no RIFF, or a compressed encoding
        raise DataError(f"audio file {path!r} is not a PCM WAV ({e}); {rule}") from None
    except OSError as e:
        raise DataError(f"audio file {path!r} cannot be read: {e.strerror or e}") from None
    channels = 1 if data.ndim == 1 else data.shape[1]
    if channels != 1 or data.dtype != np.int16:
        kind = "float" if data.dtype.kind == "f" else "integer"
        raise DataError(
            f"audio file {path!r} holds {channels} channel(s) of {8 * data.dtype.itemsize}-bit "
            f"{kind} samples; {rule}"
        )
    return np.ascontiguousarray(data, dtype=np.int16), int(rate)


def _resampled(samples: np.ndarray, rate: int, spec: LogMelSpec) -> np.ndarray:
    if rate == spec.sample_rate:
        return samples
    from scipy.signal import resample_poly

    common = math.gcd(rate, spec.sample_rate)
    out = resample_poly(samples.astype(np.float64), spec.sample_rate // common, rate // common)
    return np.clip(np.round(out), -32768, 32767).astype(np.int16)


FEATURES_VERSION = 1
"""The rule that turns a folder's clips into features (reading, resampling, the front-end of
:mod:`tinytune.data.logmel`): raise it whenever that rule changes, so that no cached file of
the old rule is read."""


class FeatureCache:
    """A keyword folder's features, computed once and kept for every process and later run.

    One ``.npy`` file (``(N, frames, bands)`` int16) under ``$TINYTUNE_CACHE/features/``, named
    by a SHA-256 over :data:`FEATURES_VERSION`, the front-end's parameters and the folder's
    ordered (keyword, file name, the file's SHA-256): the same clips give the same file wherever
    the folder lies, and changing, adding, removing or renaming a clip gives another. It is
    written under a temporary name and renamed into place, read without unpickling, and used
    only when it holds one row per clip of the front-end's shape. A cache that cannot be
    written costs the next run the computation again, nothing else (a warning says so).
    """

    def __init__(
        self,
        folder: str,
        clips: list[tuple[str, int]],
        spec: LogMelSpec,
        mixing: str = "",
        rows: int | None = None,
    ) -> None:
        import hashlib

        from tinytune.hashing import sha256_file
        from tinytune.paths import cache_dir

        head = f"tinytune features {FEATURES_VERSION} {spec!r}{' ' + mixing if mixing else ''}\n"
        digest = hashlib.sha256(head.encode())
        for file, label in clips:
            try:
                content = sha256_file(Path(file))
            except OSError as e:  # unreadable, or a folder named like a clip
                raise DataError(f"audio file {file!r} cannot be read: {e.strerror or e}") from None
            name = os.path.relpath(file, folder).replace(os.sep, "/")
            digest.update(f"{label} {name} {content}\n".encode())
        self.path = cache_dir() / "features" / f"{digest.hexdigest()}.npy"
        self.shape = (len(clips) if rows is None else rows, spec.frames, spec.bands)

    def read(self) -> np.ndarray | None:
        """The cached features, or None where there is no whole file of them."""
        try:
            features = np.load(self.path, allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None
        if features.dtype != np.int16 or features.shape != self.shape:
            return None
        return features

    def write(self, features: np.ndarray) -> None:
        """Keep ``features`` for the next run (a warning, not an error, where it cannot)."""
        import logging
        import tempfile

        staged = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                dir=self.path.parent, prefix=".", suffix=".tmp", delete=False
            ) as f:
                staged = f.name
                np.save(f, features, allow_pickle=False)
            os.chmod(staged, 0o644)  # as a file written plainly (the temporary one is 0600)
            os.replace(staged, self.path)
        except OSError as e:
            logging.getLogger(__name__).warning(
                "could not keep the keyword folder's features under %s (%s): the next run "
                "computes them again",
                self.path.parent,
                e,
            )
            if staged is not None:
                with contextlib.suppress(OSError):
                    os.unlink(staged)


class AudioDataset(SeriesDataset):
    """Keyword clips of a folder, as their log-mel features (see the module docstring).

    The folder loads at its front-end's frames (49 by default) and, for a network that takes
    other sizes, at fewer: :meth:`at` computes the features of a front-end of that many frames
    and bands in proportion (:meth:`~tinytune.data.logmel.LogMelSpec.at`), standardised on
    their own training part, so that the front-end is searched with the network it feeds.

    Attributes:
        spec: the front-end that computes the features.
        sources: each clip's speaker, where the file names say (else None).
    """

    prefix = AUDIO_PREFIX
    spec = LogMelSpec()
    words = ("clip", "keyword", "speaker")
    files: list[str]
    noise = 0.0
    """The loudest background noise mixed into the training clips' copies (0: none)."""
    _mixes: list[tuple[int, int, int, float]] | None = None

    def __init__(self, path: str, seed: int = 0) -> None:
        path, noise = _noise_option(path)
        super().__init__(path, seed)
        if noise:
            self.noise = noise
            self.name = f"{self.name}{NOISE_OPTION}{noise:g}"
            self._mix_noise()

    def _samples(self, path: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        clips, keywords = class_files(
            path, "audio", ("keyword", ".wav", "clip"), skip=(NOISE_FOLDER,)
        )
        self._clips, self._folder = clips, path
        self._views: dict[int, AudioDataset] = {self.spec.frames: self}  # shared by each
        self.files = [file for file, _ in clips]
        self.sources = file_sources(self.files)
        labels = np.asarray([label for _, label in clips], np.int64)
        return self.scaled(self._features_of(self.spec)), labels, keywords

    def _features_of(self, spec: LogMelSpec) -> np.ndarray:
        """The features of every clip by the front-end ``spec``, and of the training clips'
        noisy copies after them, from the cache or computed (and kept)."""
        cache = FeatureCache(self._folder, self._clips, spec)
        features = cache.read()
        if features is None:
            features = self._features(spec)
            cache.write(features)
        if self._mixes is None:
            return features
        noisy = FeatureCache(
            self._folder, self._clips + self._noises, spec, repr(self._mixes), len(self._mixes)
        )
        copies = noisy.read()
        if copies is None:
            copies = np.stack([logmel(self._mixed(m), spec) for m in self._mixes])
            noisy.write(copies)
        return np.concatenate([features, copies])

    def _mix_noise(self) -> None:
        """Add a copy of every training clip with background noise mixed in, after the clips,
        to the training split: a recording of ``_background_noise_`` (drawn at random,
        seeded), from a random moment, at a random volume up to :attr:`noise`."""
        folder = os.path.join(self._folder, NOISE_FOLDER)
        noises = sorted(Path(folder).glob("*.wav")) if os.path.isdir(folder) else []
        if not noises:
            raise DataError(
                f"audio folder {self._folder!r} has no {NOISE_FOLDER} folder of .wav "
                f"recordings; noise={self.noise:g} mixes them into copies of the training clips"
            )
        self._noises = [(str(f), -1) for f in noises]
        self._noise_samples = [_resampled(*read_wav(f), self.spec) for f, _ in self._noises]
        rng = np.random.default_rng([self.seed, len(self.files)])
        train = self._parts[0]
        mixes = []
        for index in train:
            which = int(rng.integers(len(noises)))
            length = self._noise_samples[which].size
            start = int(rng.integers(max(1, length - self.spec.clip + 1)))
            mixes.append((int(index), which, start, float(rng.uniform(0.0, self.noise))))
        self._mixes = mixes
        n = len(self.files)
        self._y = np.concatenate([self._y, self._y[train]])
        if self.sources is not None:
            self.sources = [*self.sources, *(self.sources[int(i)] for i in train)]
        self._parts = (np.concatenate([train, n + np.arange(len(train))]), *self._parts[1:])
        self._views = {self.spec.frames: self}
        self._hold(self.scaled(self._features_of(self.spec)))

    def _mixed(self, mix: tuple[int, int, int, float]) -> np.ndarray:
        """The clip of ``mix`` (index, noise recording, its start, volume) with the noise
        added: ``clip + volume * noise``, rounded and clipped to 16 bits."""
        index, which, start, volume = mix
        samples, rate = read_wav(self.files[index])
        clip = np.zeros(self.spec.clip, np.float64)
        samples = _resampled(samples, rate, self.spec)[: self.spec.clip]
        clip[: samples.size] = samples
        noise = np.resize(self._noise_samples[which][start:], self.spec.clip)
        return np.clip(np.round(clip + volume * noise), -32768, 32767).astype(np.int16)

    def at(self, resolution: int) -> AudioDataset:
        """The folder's clips as a front-end of ``resolution`` frames computes them (itself at
        its own frames): the same files, labels and splits, the features of
        ``spec.at(resolution)`` and their standardisation. Kept: a second call is free.

        Raises:
            DataError: a number of frames this front-end cannot make.
        """
        if resolution not in self._views:
            try:
                spec = type(self).spec.at(resolution)
            except ConfigError as e:
                raise DataError(f"{self.name!r} cannot load at {resolution} frames: {e}") from None
            view = copy.copy(self)
            view.spec = spec
            view._hold(view.scaled(self._features_of(spec)))
            self._views[resolution] = view
        return self._views[resolution]

    def searched_at(self, offered: Sequence[int]) -> tuple[int, ...]:
        """Every size offered: a front-end of each computes the features (:meth:`at`)."""
        return tuple(offered)

    def load(self, resolution: int) -> Splits:
        """The splits of the features at ``resolution`` frames (:meth:`at`).

        Raises:
            DataError: a number of frames the front-end cannot make.
        """
        view = self.at(resolution)
        return SeriesDataset.load(view, resolution)

    def check(
        self, resolutions: Sequence[int] = (), progress: ProgressCallback | None = None
    ) -> None:
        """Compute (or read from the cache) the features at each of ``resolutions``, so that
        a clip that cannot be read, or frames the front-end cannot make, fail before any
        training.

        Raises:
            DataError: as :meth:`at`.
        """
        for resolution in resolutions:
            self.at(resolution)

    def _features(self, spec: LogMelSpec) -> np.ndarray:
        """The front-end's features of every clip, ``(N, frames, bands)`` int16, each clip
        read and checked."""
        features = []
        rates: dict[int, str] = {}
        for file in self.files:
            samples, rate = read_wav(file)
            if rates and rate not in rates:
                first, had = next(iter(rates.items()))
                raise DataError(
                    f"audio file {file!r} is sampled at {rate} Hz, {had!r} at {first} Hz; "
                    "every clip of a folder has one sample rate"
                )
            rates.setdefault(rate, file)
            features.append(logmel(_resampled(samples, rate, spec), spec))
        return np.stack(features)

    @staticmethod
    def scaled(features: np.ndarray) -> np.ndarray:
        """Front-end features ``(N, frames, bands)`` (``int16``, Q8) as samples ``(N, 1,
        frames, bands)`` (float64) before their standardisation: in units of ``log2``."""
        return features.astype(np.float64)[:, None] / 256.0

    def to_input(self, features: np.ndarray) -> np.ndarray:
        """Front-end features (``int16``) as the splits hold them (float32, standardised)."""
        flat = np.asarray(features, np.int16).reshape(-1, 1, 1)
        return self.standardise(self.scaled(flat)).reshape(np.shape(features))

    def recorded(self, split: str, count: int) -> np.ndarray:
        """The first ``count`` clips of a split (``train``, ``val`` or ``test``), in the order
        of its samples: ``int16`` at the front-end's rate, padded or cut to its clip."""
        part = self._part(split)[:count]
        out = np.zeros((len(part), self.spec.clip), np.int16)
        for row, index in enumerate(part):
            if index >= len(self.files):  # a training clip's noisy copy
                out[row] = self._mixed(self._mixes[int(index) - len(self.files)])
                continue
            samples, rate = read_wav(self.files[int(index)])
            samples = _resampled(samples, rate, self.spec)[: self.spec.clip]
            out[row, : samples.size] = samples
        return out


def frontend_of(dataset: object) -> LogMelSpec | None:
    """The front-end that a device runs on what it records to make the inputs of ``dataset``:
    a keyword folder's, at its own frames (:meth:`AudioDataset.at` makes the others); None
    for samples that are the input as they are (images, sensor windows)."""
    return type(dataset).spec if isinstance(dataset, AudioDataset) else None
