"""The error classes: one module, one class per way a caller responds, each a SparsetrainError and a builtin."""

import ast
from pathlib import Path

import pytest
import torch

import sparsetrain as st
from sparsetrain import errors
from sparsetrain.errors import InputError, SettingError, SettingTypeError, SparsetrainError, UnknownEdgeTypeError

NOT_ERRORS = {"InputNote", "TrainingInterrupted"}  # a UserWarning and a KeyboardInterrupt, not errors


def _exception_classes() -> dict[str, str]:
    """Every class of the package deriving from a builtin exception, by name -> its module's path (AST only)."""
    import builtins

    builtin = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
               and issubclass(getattr(builtins, n), BaseException)}
    classes = {}
    root = Path(st.__file__).resolve().parent
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (path.relative_to(root).as_posix(), [ast.unparse(b).split(".")[-1]
                                                                          for b in node.bases])
    found: dict[str, str] = {}
    while True:
        new = {n: p for n, (p, bases) in classes.items()
               if n not in found and any(b in builtin or b in found for b in bases)}
        if not new:
            return found
        found.update(new)


def test_every_error_class_lives_in_errors_py_and_there_are_few():
    found = {n: p for n, p in _exception_classes().items() if n not in NOT_ERRORS}
    assert {p for p in found.values()} == {"errors.py"}, found
    assert len(found) <= 16, sorted(found)
    for name in found:
        cls = getattr(errors, name)
        assert issubclass(cls, SparsetrainError), name
        assert cls is SparsetrainError or any(b.__module__ == "builtins" and b is not Exception
                                              for b in cls.__mro__[1:-2]), name


def test_builtins_still_catch_them():
    with pytest.raises(ValueError):
        raise InputError("x")
    with pytest.raises(IndexError):  # PyG's loader's error for an id out of range
        raise InputError("x")
    with pytest.raises(SettingError):  # a wrong type is a bad setting too
        raise SettingTypeError("x")
    with pytest.raises(TypeError):
        raise SettingTypeError("x")
    with pytest.raises(NotImplementedError):
        raise errors.NotSupportedError("x")
    with pytest.raises(ImportError):  # a missing optional package
        raise errors.BackendError("x")


def test_an_unknown_edge_type_is_a_mapping_miss():
    from sparsetrain.sampling import CSCGraph

    graph = CSCGraph.from_edge_index_dict({("a", "x", "b"): torch.tensor([[0], [0]])}, {"a": 1, "b": 1})
    assert ("a", "y", "b") not in graph.edges and graph.edges.get(("a", "y", "b")) is None  # Mapping relies on KeyError
    with pytest.raises(UnknownEdgeTypeError) as raised:
        graph.edges[("a", "y", "b")]
    assert isinstance(raised.value, KeyError) and str(raised.value) == "('a', 'y', 'b')"


def test_subpackages_export_the_errors_they_raise():
    import sparsetrain.moe
    import sparsetrain.sampling
    import sparsetrain.storage

    assert sparsetrain.storage.InputError is InputError and "InputError" in sparsetrain.storage.__all__
    assert sparsetrain.sampling.InputError is InputError and sparsetrain.moe.SettingError is SettingError
    with pytest.raises(InputError, match="num_rows|range|out of"):
        sparsetrain.storage.TensorFeatures(torch.zeros(3, 2)).gather(torch.tensor([5]))
