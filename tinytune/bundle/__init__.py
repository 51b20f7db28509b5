"""Device bundles: a candidate's int8 training step as standalone C with one static arena, the
kernels, the helpers that make its input from a camera frame, its classes, saving and restoring
what it learned, an example that is a smoke test, a Makefile for the host, ARM Linux, Cortex-M
and RV32IMC, CMake, Zephyr and Arduino layouts, and a manifest."""

from __future__ import annotations

from tinytune.bundle.assemble import (
    Bundle,
    BundleRequest,
    Provenance,
    build_bundle,
    c_sources,
    check_candidate,
    check_options,
    exported_file_names,
)
from tinytune.bundle.errors import BundleError
from tinytune.bundle.expected import ExampleRun, simulate_example
from tinytune.bundle.manifest import (
    BUNDLE_FORMAT,
    MANIFEST_NAME,
    emulated_target,
    is_bundle,
    read_manifest,
    verify_checksums,
)
from tinytune.bundle.render import ModelInfo, render_model
from tinytune.bundle.samples import Samples, render_samples
from tinytune.bundle.writer import FolderChanges, check_destination, folder_changes, write_bundle

__all__ = [
    "BUNDLE_FORMAT",
    "MANIFEST_NAME",
    "Bundle",
    "BundleError",
    "BundleRequest",
    "ExampleRun",
    "FolderChanges",
    "ModelInfo",
    "Provenance",
    "Samples",
    "build_bundle",
    "c_sources",
    "check_candidate",
    "check_destination",
    "check_options",
    "emulated_target",
    "exported_file_names",
    "folder_changes",
    "is_bundle",
    "read_manifest",
    "render_model",
    "render_samples",
    "simulate_example",
    "verify_checksums",
    "write_bundle",
]
