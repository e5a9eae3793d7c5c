"""``metagen testbed train`` never writes into the package's shipped models unless told to: the
default output folder is ``./testbed_models`` (outside the package), and ``--out`` naming the
shipped folder is refused naming ``out`` before any training, unless ``--overwrite-shipped``."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from metagen.cli import main
from metagen.errors import InvalidParameterError
from metagen.testbed.modeling import MODELS_DIR
from metagen.testbed.pipeline import check_out_root, train_all


def _inside_package(path: Path) -> bool:
    package = MODELS_DIR.resolve().parent.parent  # metagen/
    return path.resolve().is_relative_to(package)


def test_the_defaults_are_outside_the_package() -> None:
    from metagen.cli.testbed import train
    default = inspect.signature(train_all).parameters["out_root"].default
    assert not _inside_package(Path(default))
    [out] = [p for p in train.params if p.name == "out"]
    assert not _inside_package(Path(out.default))


def test_the_shipped_folder_is_refused_before_any_training(capsys) -> None:
    before = {f: f.stat().st_mtime_ns for f in MODELS_DIR.rglob("*") if f.is_file()}
    for out in (str(MODELS_DIR), str(MODELS_DIR / ".." / "models")):
        assert main(["testbed", "train", "--only", "draft", "--out", out]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "out" in err and "--overwrite-shipped" in err, err
    with pytest.raises(InvalidParameterError, match="shipped"):
        train_all(only="draft", out_root=MODELS_DIR)
    assert {f: f.stat().st_mtime_ns for f in MODELS_DIR.rglob("*") if f.is_file()} == before
    assert check_out_root(MODELS_DIR, overwrite_shipped=True) == MODELS_DIR
