"""Data sets: the real ``digits``, ``procedural`` and formula-driven source tasks,
``imagefolder:PATH``, ``series:PATH`` and ``audio:PATH``."""

from __future__ import annotations

from tinytune.data.audio import AudioDataset, frontend_of
from tinytune.data.base import MAX_RESOLUTION, MIN_RESOLUTION, ImageDataset
from tinytune.data.decoded import DecodeProgress, decoded_root
from tinytune.data.digits import DigitsDataset
from tinytune.data.formula import FormulaTask
from tinytune.data.glyphs import GlyphTask, SourceTask
from tinytune.data.imagefolder import IMAGE_EXTENSIONS, ImageFolderDataset
from tinytune.data.procedural import ProceduralDataset, ProceduralTask
from tinytune.data.registry import DATASET_NAMES, get_dataset
from tinytune.data.series import SeriesDataset
from tinytune.data.sources import SOURCE_TASKS, get_source_task
from tinytune.data.splits import (
    Images,
    Pixels,
    Split,
    Splits,
    repeated,
    train_subset,
    val_repeats,
)
from tinytune.data.stratify import stratified_split

__all__ = [
    "DATASET_NAMES",
    "IMAGE_EXTENSIONS",
    "MAX_RESOLUTION",
    "MIN_RESOLUTION",
    "SOURCE_TASKS",
    "AudioDataset",
    "DecodeProgress",
    "DigitsDataset",
    "FormulaTask",
    "GlyphTask",
    "ImageDataset",
    "ImageFolderDataset",
    "Images",
    "Pixels",
    "ProceduralDataset",
    "ProceduralTask",
    "SeriesDataset",
    "SourceTask",
    "Split",
    "Splits",
    "decoded_root",
    "frontend_of",
    "get_dataset",
    "get_source_task",
    "repeated",
    "stratified_split",
    "train_subset",
    "val_repeats",
]
